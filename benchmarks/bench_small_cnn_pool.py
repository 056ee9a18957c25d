"""The small CNN's pooling on the CPU: PGD-10 AT epochs of the engine with ``nn.AdaptiveMaxPool2d`` against the
engine's ``AdaptiveMaxPool2dCL`` (the same pooling from a channels-last copy; engine/models/small.py).

    python benchmarks/bench_small_cnn_pool.py [--batches N] [--repeats R] [--threads T]

For fp32 and bf16 autocast, contiguous and channels-last, it builds one engine trainer on digits-shaped data
(benchmarks/bench_train_step.py's), swaps the pool module in and out of the same model between epochs, in
alternating order, and prints the best images/s of each pool and their ratio. The two pools compute the same
numbers (tests/engine/test_models.py), so only the time differs. Channels-last inputs are pooled as they are by
both: those rows measure the noise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = [("fp32", False), ("fp32", True), ("bf16", False), ("bf16", True)]


def measure(precision: str, channels_last: bool, batches: int, repeats: int) -> dict:
    import torch
    from torch import nn

    from benchmarks.bench_train_step import CASES, make_trainer
    from engine.models.small import AdaptiveMaxPool2dCL, SmallCNN

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer("small_cnn", batches, Path(tmp), None, precision, channels_last)
        cnn = next(m for m in trainer.model.modules() if isinstance(m, SmallCNN))
        index = next(i for i, m in enumerate(cnn.features) if isinstance(m, nn.AdaptiveMaxPool2d))
        pools = {"nn.AdaptiveMaxPool2d": nn.AdaptiveMaxPool2d(4), "AdaptiveMaxPool2dCL": AdaptiveMaxPool2dCL(4)}
        times: dict[str, list[float]] = {name: [] for name in pools}
        for pool in pools.values():  # warm-up
            cnn.features[index] = pool
            trainer.train_epoch(1)
        for r in range(repeats):
            for name in (list(pools) if r % 2 == 0 else list(pools)[::-1]):
                cnn.features[index] = pools[name]
                t = time.perf_counter()
                trainer.train_epoch(1)
                times[name].append(time.perf_counter() - t)
        images = CASES["small_cnn"]["batch"] * batches
        return {name: images / min(t) for name, t in times.items()} | {"device": trainer.rt.describe()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=40, help="batches per timed epoch")
    parser.add_argument("--repeats", type=int, default=6, help="timed epochs of each pool, alternating")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: PyTorch's own)")
    args = parser.parse_args()
    if args.batches < 1 or args.repeats < 1 or args.threads < 0:
        parser.error("--batches and --repeats must be 1 or more, --threads 0 (the default) or more")
    import torch

    from engine.runtime.provenance import cpu

    if args.threads:
        torch.set_num_threads(args.threads)
    info = cpu()
    print(f"CPU: {info['model']} ({', '.join(info['flags']) or 'no kernel flags'}); threads: {torch.get_num_threads()}; "
          f"{args.batches} batches of 64 an epoch, best of {args.repeats}")
    print("| precision | memory | nn.AdaptiveMaxPool2d img/s | AdaptiveMaxPool2dCL img/s | speed-up |")
    print("|---|---|---|---|---|")
    for precision, channels_last in CONFIGS:
        r = measure(precision, channels_last, args.batches, args.repeats)
        old, new = r["nn.AdaptiveMaxPool2d"], r["AdaptiveMaxPool2dCL"]
        print(f"| {precision} | {'channels-last' if channels_last else 'contiguous'} | {old:.0f} | {new:.0f} | "
              f"{new / old:.2f} |", flush=True)


if __name__ == "__main__":
    main()
