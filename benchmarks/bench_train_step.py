"""PGD-10 AT training throughput: the engine's loop against a bare PyTorch loop doing the same arithmetic.

    python benchmarks/bench_train_step.py [--batches N] [--repeats R]

For each model (PreAct-ResNet18 on 32x32 inputs, the small CNN on 8x8 digits)
it times `Trainer.train_epoch` over N batches and a bare loop with the same
operations (PGD-10 in eval mode, a clean eval-mode forward, the training
forward / backward / SGD step), alternating them R times, and prints images/s,
their ratio, the engine's per-epoch bookkeeping (checkpoint + event) amortised
over a CIFAR-10 epoch, and peak memory. Each configuration runs in its own
process so the peak resident memory is its own.
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
CIFAR_BATCHES_PER_EPOCH = 391


def synthetic_splits(shape, n, k=10):
    import torch

    from engine.data.datasets import Splits
    from engine.data.tensors import TensorData

    g = torch.Generator().manual_seed(0)
    data = TensorData(torch.rand(n, *shape, generator=g), torch.randint(0, k, (n,), generator=g))
    small = data.subset(torch.arange(min(n, 20)))
    return Splits(data, small, small, [str(i) for i in range(k)], (0.5,) * shape[0], (0.25,) * shape[0], "none")


def make_trainer(arch: str, batches: int, run_dir: Path):
    import torch  # noqa: F401

    from engine import trainer as trainer_mod
    from engine.contract.profile_io import load_profile
    from engine.contract.events import EventWriter
    from engine.progress import Progress
    from engine.utils import make_runtime

    case = CASES[arch]
    profile_path = run_dir / "p.toml"
    profile_path.write_text(
        f'[data]\ndataset = "digits"\nbatch_size = {case["batch"]}\n[model]\narch = "{arch}"\n'
        f'[train]\nepochs = 1\ndevice = "cpu"\n[attack]\neps = {case["eps"]}\nstep = {case["step"]}\nsteps = 10\n')
    profile = load_profile(profile_path)
    trainer_mod.load_splits = lambda cfg, seed: synthetic_splits(case["shape"], case["batch"] * batches)
    events = EventWriter(run_dir / "events.jsonl", "bench")
    return trainer_mod.Trainer(run_dir, profile, make_runtime(profile.train), events,
                               Progress(run_dir / "progress.json"), lambda: False)


def bare_epoch(trainer, arch: str) -> None:
    """The same arithmetic as PGD-AT's loss and the loop, with no bookkeeping."""
    import torch
    import torch.nn.functional as F

    case, model, opt = CASES[arch], trainer.model, trainer.optimizer
    data, bs = trainer.splits.train, case["batch"]
    order = torch.randperm(len(data))
    model.train()
    for b in range(len(data) // bs):
        idx = order[b * bs:(b + 1) * bs]
        x, y = data.images(idx), data.y[idx]
        model.eval()
        delta = (torch.rand_like(x) * 2 - 1) * case["eps"]
        delta = (x + delta).clamp(0, 1) - x
        for _ in range(10):
            delta.requires_grad_(True)
            loss = F.cross_entropy(model(x + delta), y, reduction="none").sum()
            (grad,) = torch.autograd.grad(loss, delta)
            delta = (delta.detach() + case["step"] * grad.sign()).clamp(-case["eps"], case["eps"])
            delta = (x + delta).clamp(0, 1) - x
        with torch.no_grad():
            model(x)
        model.train()
        loss = F.cross_entropy(model(x + delta), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def measure(arch: str, batches: int, repeats: int) -> dict:
    import torch

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(arch, batches, Path(tmp))
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
        "arch": arch, "batch": CASES[arch]["batch"], "batches": batches,
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
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.batches, args.repeats)))
        return
    rows = []
    for arch in CASES:
        batches = args.batches or (4 if arch == "preact_resnet18" else 40)
        out = subprocess.run([sys.executable, __file__, "--one", arch, "--batches", str(batches), "--repeats",
                              str(args.repeats)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    header = ("model", "batch", "bare img/s", "engine img/s", "engine/bare (min)", "engine/bare (median)",
              "ckpt+event per epoch", "as % of a CIFAR epoch", "peak RSS MiB")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print(f"| {r['arch']} | {r['batch']} | {r['bare_img_s']:.1f} | {r['engine_img_s']:.1f} | "
              f"{r['ratio_min']:.3f} | {r['ratio_median']:.3f} | {r['epoch_bookkeeping_s'] * 1000:.0f} ms | "
              f"{r['epoch_bookkeeping_pct']:.3f}% | {r['peak_rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
