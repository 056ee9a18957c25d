"""Epoch time of one run on 1 and on N processes (DDP): gloo on the CPU, NCCL on GPUs.

    python benchmarks/bench_ddp.py [--epochs E] [--procs 1,2] [--device cpu|cuda] [--arch small_cnn|wide_resnet]

Each configuration is a whole engine run (``python -m engine train RUN --nproc N``)
on scikit-learn's digits with PGD-10 AT; the table gives the median of the
epochs' ``time_s`` after the first (training plus validation, without start-up),
images per second and the speed-up over one process. On the CPU the processes
share the machine's cores: 1 process uses all of them, N processes 1/N each,
so the CPU rows measure the overhead of the collectives, not a scaling you
would get from more hardware. GPU rows need as many GPUs as processes; with
fewer, they are skipped and the table says so (nothing is estimated).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROFILE = """
name = "bench-ddp"
seed = 0
[data]
dataset = "digits"
val_per_class = 20
batch_size = {batch}
[model]
arch = "{arch}"
depth = 10
width = {width}
[train]
epochs = {epochs}
lr = 0.05
device = "{device}"
sync_bn = {sync_bn}
[attack]
eps = 0.2
step = 0.05
steps = 10
[method]
name = "pgd_at"
[eval]
attacks = ["clean"]
checkpoints = ["last"]
val_attack = "pgd10"
"""


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def run_once(nproc: int, args: argparse.Namespace, sync_bn: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        width = 1 if args.arch == "wide_resnet" else 10
        (run_dir / "profile.toml").write_text(PROFILE.format(
            batch=args.batch, arch=args.arch, width=width, epochs=args.epochs, device=args.device,
            sync_bn=str(sync_bn).lower()))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        if args.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(nproc))
        started = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "engine", "train", str(run_dir), "--nproc", str(nproc)],
                             env=env, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - started
        if res.returncode != 0:
            raise SystemExit(f"{nproc} processes failed:\n{res.stderr[-2000:]}")
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        ends = [e for e in events if e["type"] == "epoch_end"]
        times = [e["time_s"] for e in ends[1:]] or [ends[0]["time_s"]]
        n = sum(ends[0]["train"]["count_per_class"])
        return {"epoch_s": statistics.median(times), "images_s": n / statistics.median(times), "wall_s": wall,
                "device": next(e for e in events if e["type"] == "run_started")["device"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--procs", default="1,2")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--arch", default="small_cnn", choices=("small_cnn", "wide_resnet"))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--sync-bn", action="store_true", help="train.sync_bn (wide_resnet has BatchNorm)")
    args = parser.parse_args()
    procs = [int(p) for p in args.procs.split(",")]
    print(f"# DDP, {args.arch}, digits, PGD-10 AT, global batch {args.batch}, {args.device}, "
          f"sync_bn {args.sync_bn}, {os.cpu_count()} CPU cores, {gpu_count()} GPUs visible")
    print(f"{'procs':>5}  {'epoch s':>8}  {'images/s':>9}  {'speed-up':>8}  {'wall s':>7}")
    base = None
    for nproc in procs:
        if args.device == "cuda" and nproc > gpu_count():
            print(f"{nproc:>5}  not measured: {gpu_count()} GPU(s) here")
            continue
        r = run_once(nproc, args, args.sync_bn)
        if base is None:
            base = r["epoch_s"]
        speed = f"{base / r['epoch_s']:.2f}x"
        print(f"{nproc:>5}  {r['epoch_s']:>8.3f}  {r['images_s']:>9.0f}  {speed:>8}  {r['wall_s']:>7.1f}")


if __name__ == "__main__":
    main()
