"""Epoch time on one device: the engine on at.toml and cfa-at.toml against bare loops doing the same arithmetic.

    python benchmarks/bench_gpu.py [--data-root DIR] [--profiles at,cfa-at] [--precisions fp32,bf16]
                                   [--epochs 2] [--device cuda|cpu] [--tiny] [--json FILE]

For each profile and precision it times four ways of running one epoch (the
49,000 training images, then the validation pass of the 1,000 validation
images with PGD-10):
- bare eager: a plain loop with the data already on the device (PGD-10 in eval
  mode with per-sample eps, a clean eval forward, the training forward / backward
  / SGD step; for CFA the class-wise eps of the batch);
- bare compiled: the same loop over the model compiled as the engine compiles it (reduce-overhead on
  CUDA, graphs at the training and evaluation batch sizes, other batch sizes eager);
- engine eager and engine compiled: `Trainer.run_epoch` (training, validation,
  the method's end of epoch, checkpoint and event), `train.compile` off / on.
fp32 is plain float32; bf16 is bf16 autocast with channels-last. Each epoch time
is the fastest after the first epoch (which compiles). CFA's FAWA and EMA start
at epoch 1 here, so its epoch carries their cost as it does from epoch 50 on.

Data: real CIFAR-10 from `--data-root` (the cifar-10-batches-py folder's
parent), else random CIFAR-shaped images. `--tiny --device cpu` is a seconds-long
smoke mode (small CNN, 2 PGD steps, 64 images) that the tests run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRECISIONS = {"fp32": ('train.amp="none"', "train.channels_last=false"),
              "bf16": ('train.amp="bf16"', "train.channels_last=true")}
TINY = ('model.arch="small_cnn"', "attack.steps=2", "data.batch_size=16", "data.eval_batch_size=16",
        "data.val_fraction=0.1")


def synthetic_cifar(n_train: int, n_test: int):
    """Random CIFAR-shaped uint8 images with balanced labels, through the engine's own split logic."""
    import torch

    from engine.data.tensors import TensorData

    g = torch.Generator().manual_seed(0)

    def make(n: int) -> TensorData:
        return TensorData(torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8),
                          torch.arange(n) % 10)

    return lambda cfg: (make(n_train), make(n_test), [f"class{i}" for i in range(10)])


def load(profile_name: str, precision: str, args, compiled: bool):
    from engine.contract.profile_io import load_profile

    overrides = [*PRECISIONS[precision], f'train.device="{args.device}"', f'train.compile="{"on" if compiled else "off"}"',
                 "train.ema_start_epoch=1", *(TINY if args.tiny else ())]
    if profile_name.startswith("cfa"):
        overrides += ["method.fawa_start_epoch=1", "method.calibration_start_epoch=1"]
    if args.data_root:
        overrides.append(f'data.root="{args.data_root}"')
    return load_profile(ROOT / "profiles" / f"{profile_name}.toml", overrides)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_trainer(run_dir: Path, profile):
    """The engine's Trainer of ``profile`` in a scratch run folder, started: (its runtime, the trainer)."""
    from engine.training import trainer as trainer_mod
    from engine.contract.events import EventWriter
    from engine.runtime.progress import Progress
    from engine.runtime.device import make_runtime

    rt = make_runtime(profile.train)
    trainer = trainer_mod.Trainer(run_dir, profile, rt, EventWriter(run_dir / "events.jsonl", "bench"),
                                  Progress(run_dir / "progress.json"), lambda: False)
    trainer.start_or_resume()
    return rt, trainer


def engine_times(profile, epochs: int) -> list[float]:
    import torch

    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as tmp:
        rt, trainer = bench_trainer(Path(tmp), profile)
        times = []
        for epoch in range(1, epochs + 1):
            sync(rt.device)
            t = time.perf_counter()
            trainer.run_epoch(epoch)
            sync(rt.device)
            times.append(time.perf_counter() - t)
    return times


def bare_times(profile, epochs: int, compiled: bool) -> list[float]:
    """The engine's arithmetic in a plain loop: no method objects, events, checkpoints or progress."""
    import torch
    import torch.nn.functional as F

    from engine.runtime.compiled import compile_model
    from engine.data import load_splits
    from engine.data.augment import plan_epoch
    from engine.models import build_model
    from engine.runtime.device import make_runtime

    torch._dynamo.reset()
    torch.manual_seed(0)
    rt = make_runtime(profile.train)
    dev, a, t = rt.device, profile.attack, profile.train
    splits = load_splits(profile.data, profile.seed)
    train, val = splits.train.to(dev), splits.val.to(dev)
    model = build_model(profile.model, splits.input_shape, splits.num_classes, splits.mean, splits.std).to(dev)
    if rt.channels_last:
        model = model.to(memory_format=torch.channels_last)
    # Compiled as the engine compiles (engine/runtime/compiled.py): graphs at the training and evaluation batch sizes,
    # the short last batch eager. A plain torch.compile(model, mode="reduce-overhead") took 52 s an epoch on
    # the first H100 (bf16, at.toml), slower than eager (31 s): no baseline for the engine's 12.5 s.
    mode = "reduce-overhead" if dev.type == "cuda" else "default"
    net = compile_model(model, (profile.data.batch_size, profile.data.eval_batch_size), mode) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    # CFA's class-wise margins: per-sample eps of the batch's classes (uniform values, same arithmetic)
    eps_per_class = torch.full((splits.num_classes,), a.eps, device=dev)

    def pgd(x, y):
        eps = eps_per_class[y].view(-1, 1, 1, 1)
        delta = ((torch.rand_like(x) * 2 - 1) * eps + x).clamp(0, 1) - x
        for _ in range(a.steps):
            delta.requires_grad_(True)
            with rt.autocast():
                loss = F.cross_entropy(net(x + delta), y, reduction="none").sum()
            (grad,) = torch.autograd.grad(loss, delta)
            delta = torch.maximum(torch.minimum(delta.detach() + a.step * grad.sign(), eps), -eps)
            delta = (x + delta).clamp(0, 1) - x
        return x + delta

    def epoch(e: int) -> None:
        plan = plan_epoch(len(train), profile.data.batch_size, tuple(train.x.shape[1:]), splits.augment,
                          profile.seed, e).to(dev)
        for b in range(plan.batches):
            if compiled and dev.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            x, y = plan.batch(b, train.images, train.y)
            x = rt.input_format(x)
            model.eval()
            x_adv = pgd(x, y)
            with torch.no_grad(), rt.autocast():
                net(x)
            model.train()
            with rt.autocast():
                loss = F.cross_entropy(net(x_adv), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        model.eval()
        for start in range(0, len(val), profile.data.eval_batch_size):
            x = rt.input_format(val.images(slice(start, start + profile.data.eval_batch_size)))
            y = val.y[start:start + profile.data.eval_batch_size]
            with torch.no_grad(), rt.autocast():
                net(x)
            x_adv = pgd(x, y)
            with torch.no_grad(), rt.autocast():
                net(x_adv)

    times = []
    for e in range(1, epochs + 1):
        sync(dev)
        start = time.perf_counter()
        epoch(e)
        sync(dev)
        times.append(time.perf_counter() - start)
    return times


def steady(times: list[float]) -> float:
    """The fastest epoch after the first (which compiles and warms up); the only one if there is one."""
    return min(times[1:]) if len(times) > 1 else times[0]


WAYS = ("bare_eager", "bare_compiled", "engine_eager", "engine_compiled")


def measure(profile_name: str, precision: str, args) -> dict:
    """One row: each asked-for way's epoch times; a way that fails is recorded with its error, not fatal."""
    import traceback

    eager, compiled = load(profile_name, precision, args, False), load(profile_name, precision, args, True)
    timers = {"bare_eager": lambda: bare_times(eager, args.epochs, False),
              "bare_compiled": lambda: bare_times(eager, args.epochs, True),
              "engine_eager": lambda: engine_times(eager, args.epochs),
              "engine_compiled": lambda: engine_times(compiled, args.epochs)}
    row = {"profile": profile_name, "precision": precision}
    for key in args.ways.split(","):
        try:
            row[key] = timers[key]()
            row[key + "_s"] = steady(row[key])
        except Exception as err:  # noqa: BLE001 - one failing way must not lose the others' numbers
            row[key + "_error"] = f"{type(err).__name__}: {err}"[:500]
            traceback.print_exc()
        print(f"{profile_name} {precision} {key}: {row.get(key, row.get(key + '_error'))}", file=sys.stderr,
              flush=True)
    for kind in ("eager", "compiled"):
        if f"engine_{kind}_s" in row and f"bare_{kind}_s" in row:
            row[f"ratio_{kind}"] = row[f"engine_{kind}_s"] / row[f"bare_{kind}_s"]
    return row


def device_name(device: str) -> str:
    import platform

    import torch

    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads), torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default="", help="folder holding cifar-10-batches-py (else random data)")
    parser.add_argument("--profiles", default="at,cfa-at")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per configuration (first warms up)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (small CNN, 64 images)")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"which of {','.join(WAYS)} to time")
    parser.add_argument("--json", default="", help="also write the rows, with every epoch's time, to this file")
    args = parser.parse_args()
    if not args.data_root:
        import engine.data.datasets as datasets

        datasets.load_raw = synthetic_cifar(64 if args.tiny else 50_000, 16 if args.tiny else 10_000)
    unknown = set(args.ways.split(",")) - set(WAYS)
    if unknown:
        parser.error(f"unknown --ways {sorted(unknown)}; choose from {','.join(WAYS)}")
    data = f"CIFAR-10 from {args.data_root}" if args.data_root else "random CIFAR-shaped data"
    rows = []
    for p in args.profiles.split(","):
        for prec in args.precisions.split(","):
            rows.append(measure(p, prec, args))
            if args.json:  # after every row, so that a run cut off keeps what it measured
                Path(args.json).write_text(json.dumps({"device": device_name(args.device), "data": data,
                                                       "rows": rows}, indent=1))
    print(f"device: {device_name(args.device)}; data: {data}; seconds per epoch (fastest after the first)")
    header = ("profile", "precision", "bare eager", "bare compiled", "engine eager", "engine compiled",
              "engine/bare eager", "engine/bare compiled")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    cell = (lambda r, k, f: f.format(r[k]) if k in r else ("failed" if k.replace("_s", "_error") in r else "-"))
    for r in rows:
        print("| " + " | ".join([r["profile"], r["precision"], *(cell(r, w + "_s", "{:.2f}") for w in WAYS),
                                 cell(r, "ratio_eager", "{:.3f}"), cell(r, "ratio_compiled", "{:.3f}")]) + " |")
    ratios = [r["ratio_compiled"] for r in rows if "ratio_compiled" in r]
    if ratios:
        print(f"median engine/bare (compiled): {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
