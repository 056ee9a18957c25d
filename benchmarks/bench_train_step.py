"""PGD-10 AT training throughput on the CPU: the engine's loop against a bare PyTorch loop doing the same arithmetic.

    python benchmarks/bench_train_step.py [--batches N] [--repeats R] [--threads T] [--json] [--only PREFIX]

For each configuration (PreAct-ResNet18 on 32x32 inputs at base width 8, the CPU-scale CIFAR-10 model, and at
full width 64, and the small CNN on 8x8 digits, each in fp32 and in bf16 autocast, each contiguous and
channels-last) it times `Trainer.train_epoch` over N batches and a bare loop with the same operations (PGD-10 in eval
mode, a clean eval-mode forward, the training forward / backward / SGD step, under the same autocast and memory
format), alternating them R times, and prints images/s, their ratio, the speed against the same model's fp32
contiguous row, the engine's per-epoch bookkeeping (checkpoint + event) amortised over a CIFAR-10 epoch, and peak
memory. Each configuration runs in its own process so the peak resident memory is its own. ``--json`` prints one
document: ``{"cpu": ..., "threads": ..., "rows": [{model, base_width, precision, channels_last, bare_img_s,
engine_img_s, ...}]}``. bf16 is fast on CPUs with bf16 units (AVX512-BF16, AMX: ``cpu.flags``); elsewhere it is
emulated and slower than fp32.

``--threads T`` sets the intra-op threads (default: PyTorch's, one per core). Beside other work give it the
cores that are free: on 2 cores beside a one-thread training run, 2 threads measured 2.4 img/s where 1 thread
measured 54 (PreAct-ResNet18 width 8; 2026-11-27), because an OpenMP team waits for its slowest thread.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = {
    "preact_resnet18": {"shape": (3, 32, 32), "batch": 32, "eps": 8 / 255, "step": 2 / 255},
    "small_cnn": {"shape": (1, 8, 8), "batch": 64, "eps": 0.2, "step": 0.05},
}
# (model, base width or None, precision, channels-last): the rows, in order
CONFIGS = [("preact_resnet18", width, precision, cl) for width in (8, 64) for precision in ("fp32", "bf16")
           for cl in (False, True)] + [("small_cnn", None, precision, cl) for precision in ("fp32", "bf16")
                                       for cl in (False, True)]


def config_name(arch: str, width: int | None, precision: str, channels_last: bool) -> str:
    return ":".join([arch, str(width or "-"), precision, "cl" if channels_last else "contig"])
CIFAR_BATCHES_PER_EPOCH = 391


def synthetic_splits(shape, n, k=10):
    import torch

    from engine.data.datasets import Splits
    from engine.data.tensors import TensorData

    g = torch.Generator().manual_seed(0)
    data = TensorData(torch.rand(n, *shape, generator=g), torch.randint(0, k, (n,), generator=g))
    small = data.subset(torch.arange(min(n, 20)))
    return Splits(data, small, small, [str(i) for i in range(k)], (0.5,) * shape[0], (0.25,) * shape[0], "none")


def make_trainer(arch: str, batches: int, run_dir: Path, width: int | None = None, precision: str = "fp32",
                 channels_last: bool = False):
    import torch  # noqa: F401

    from engine.training import trainer as trainer_mod
    from engine.contract.profile_io import load_profile
    from engine.contract.events import EventWriter
    from engine.runtime.progress import Progress
    from engine.runtime.device import make_runtime

    case = CASES[arch]
    profile_path = run_dir / "p.toml"
    amp = "bf16" if precision == "bf16" else "none"
    profile_path.write_text(
        f'[data]\ndataset = "digits"\nbatch_size = {case["batch"]}\n[model]\narch = "{arch}"\n'
        + (f"base_width = {width}\n" if width else "")
        + f'[train]\nepochs = 1\ndevice = "cpu"\namp = "{amp}"\nchannels_last = {str(channels_last).lower()}\n'
        f'[attack]\neps = {case["eps"]}\nstep = {case["step"]}\nsteps = 10\n')
    profile = load_profile(profile_path)
    trainer_mod.load_splits = lambda cfg, seed: synthetic_splits(case["shape"], case["batch"] * batches)
    events = EventWriter(run_dir / "events.jsonl", "bench")
    return trainer_mod.Trainer(run_dir, profile, make_runtime(profile.train), events,
                               Progress(run_dir / "progress.json"), lambda: False)


def bare_epoch(trainer, arch: str) -> None:
    """The same arithmetic as PGD-AT's loss and the loop, with no bookkeeping. As in the engine, one autocast
    context holds the attack and the training forward: autocast keeps the weights' bf16 copies for the context's
    life, so a context per attack step would cast them again each step (12 times a batch instead of once: the
    digits CNN's bf16 bare loop did twice the engine's casts before 2026-11-28, and the ratio compared unlike loops)."""
    import torch
    import torch.nn.functional as F

    case, model, opt, rt = CASES[arch], trainer.model, trainer.optimizer, trainer.rt
    data, bs = trainer.splits.train, case["batch"]
    order = torch.randperm(len(data))
    model.train()
    for b in range(len(data) // bs):
        idx = order[b * bs:(b + 1) * bs]
        x, y = rt.input_format(data.images(idx)), data.y[idx]
        with rt.autocast():
            model.eval()
            delta = (torch.rand_like(x) * 2 - 1) * case["eps"]
            delta = (x + delta).clamp(0, 1) - x
            for _ in range(10):
                delta.requires_grad_(True)
                logits = model(x + delta)
                loss = F.cross_entropy(logits.float(), y, reduction="none").sum()
                (grad,) = torch.autograd.grad(loss, delta)
                delta = (delta.detach() + case["step"] * grad.sign()).clamp(-case["eps"], case["eps"])
                delta = (x + delta).clamp(0, 1) - x
            with torch.no_grad():
                model(x)
            model.train()
            logits = model(x + delta)
            loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def measure(config: str, batches: int, repeats: int, threads: int = 0) -> dict:
    import torch

    if threads:
        torch.set_num_threads(threads)

    arch, width, precision, layout = config.split(":")
    width = None if width == "-" else int(width)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(arch, batches, Path(tmp), width, precision, layout == "cl")
        images = CASES[arch]["batch"] * batches
        bare_epoch(trainer, arch)  # warm-up
        trainer.train_epoch(1)
        engine_t, bare_t = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            bare_epoch(trainer, arch)
            bare_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            trainer.train_epoch(1)
            engine_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        event = {"epoch": 1, "train": {"robust_acc_per_class": [0.5] * 10}, "val": {}}
        trainer.store.save(trainer._checkpoint(1, event), best_model=trainer.model.state_dict(), best_meta={})
        trainer.events.emit("epoch_end", **event)
        per_epoch = time.perf_counter() - t
    step_bare = min(bare_t) / batches
    return {
        "model": arch, "base_width": width, "precision": precision, "channels_last": layout == "cl",
        "device": trainer.rt.describe(), "threads": torch.get_num_threads(),
        "batch": CASES[arch]["batch"], "batches": batches,
        "bare_img_s": images / min(bare_t), "engine_img_s": images / min(engine_t),
        "ratio_min": min(engine_t) / min(bare_t),
        "ratio_median": statistics.median(e / b for e, b in zip(engine_t, bare_t)),
        "epoch_bookkeeping_s": per_epoch,
        "epoch_bookkeeping_pct": 100 * per_epoch / (step_bare * CIFAR_BATCHES_PER_EPOCH),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=0, help="batches per timed epoch (default per model)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: PyTorch's own)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--only", default="", help="the configurations whose name starts with this, e.g. "
                        "preact_resnet18:8 (names: MODEL:WIDTH:fp32|bf16:contig|cl)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batches < 0 or args.repeats < 1 or args.threads < 0:
        parser.error("--batches and --threads must be 0 (the default) or more, --repeats 1 or more")
    if args.one:
        print(json.dumps(measure(args.one, args.batches, args.repeats, args.threads)))
        return
    from engine.runtime.provenance import cpu

    rows = []
    for arch, width, precision, cl in CONFIGS:
        name = config_name(arch, width, precision, cl)
        if not name.startswith(args.only):
            continue
        batches = args.batches or (40 if arch == "small_cnn" else 4 if width and width <= 16 else 2)
        out = subprocess.run([sys.executable, __file__, "--one", name, "--batches", str(batches), "--repeats",
                              str(args.repeats), "--threads", str(args.threads)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"measured {name}: engine {rows[-1]['engine_img_s']:.1f} img/s, bare {rows[-1]['bare_img_s']:.1f}",
              file=sys.stderr, flush=True)
    for r in rows:  # the speed against the same model's fp32 contiguous row, engine against engine
        base = next((b for b in rows if (b["model"], b["base_width"]) == (r["model"], r["base_width"])
                     and b["precision"] == "fp32" and not b["channels_last"]), None)
        r["vs_fp32_contiguous"] = r["engine_img_s"] / base["engine_img_s"] if base else None
    if args.json:
        print(json.dumps({"cpu": cpu(), "rows": rows}))
        return
    info = cpu()
    print(f"CPU: {info['model']} ({', '.join(info['flags']) or 'no kernel flags'}); "
          f"threads: {rows[0]['threads'] if rows else '?'}")
    header = ("model", "width", "precision", "memory", "bare img/s", "engine img/s", "engine/bare (min)",
              "engine/bare (median)", "vs fp32 contiguous", "ckpt+event per epoch", "as % of a CIFAR epoch",
              "peak RSS MiB")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        vs = f"{r['vs_fp32_contiguous']:.2f}" if r["vs_fp32_contiguous"] else "-"
        print(f"| {r['model']} | {r['base_width'] or '-'} | {r['precision']} | "
              f"{'channels-last' if r['channels_last'] else 'contiguous'} | {r['bare_img_s']:.1f} | "
              f"{r['engine_img_s']:.1f} | {r['ratio_min']:.3f} | {r['ratio_median']:.3f} | {vs} | "
              f"{r['epoch_bookkeeping_s'] * 1000:.0f} ms | {r['epoch_bookkeeping_pct']:.3f}% | "
              f"{r['peak_rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
