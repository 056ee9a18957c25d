"""CPU slots: the machine's training throughput as one run on every core against one-thread runs side by side.

    python benchmarks/bench_slots.py [--batches N] [--repeats R] [--config NAME] [--json]

The queue treats the CPU as ``cores // threads`` slots (docs/sweeps-and-slurm.md): runs of `fairtui judge` and
`fairtui sweep` on the CPU train with one thread each, as many at once as there are cores. This measures why, on
the CPU-scale CIFAR-10 model (PreAct-ResNet18 at base width 8, 32x32 inputs, batch 32, PGD-10 AT: the engine's
`Trainer.train_epoch` through benchmarks/bench_train_step.py) it times

- one run with one thread a core, and
- one one-thread run a core, started together, each in its own process,

and prints the images a second of the whole machine (the sum over the runs side by side), and their ratio. Each
run times its best of R epochs of N batches, after a warm-up epoch; the side-by-side runs overlap for their whole
timed part (they start together and do the same work). Quote the CPU (printed) beside the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STEP = ROOT / "benchmarks" / "bench_train_step.py"


def start(config: str, batches: int, repeats: int, threads: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    return subprocess.Popen([sys.executable, str(STEP), "--one", config, "--batches", str(batches), "--repeats",
                             str(repeats), "--threads", str(threads)], stdout=subprocess.PIPE, text=True, env=env)


def collect(procs: list[subprocess.Popen]) -> list[dict]:
    out = []
    for proc in procs:
        stdout, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"a measuring process failed (exit {proc.returncode})")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20, help="batches per timed epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--config", default="preact_resnet18:8:fp32:contig",
                        help="a configuration of bench_train_step.py (MODEL:WIDTH:fp32|bf16:contig|cl)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from engine.runtime.provenance import cpu

    cores = os.cpu_count() or 1
    rows = []
    one = collect([start(args.config, args.batches, args.repeats, cores)])
    rows.append({"layout": f"1 run x {cores} threads", "runs": 1, "threads": cores,
                 "img_s_each": [r["engine_img_s"] for r in one], "img_s_total": sum(r["engine_img_s"] for r in one)})
    print(f"measured 1 run x {cores} threads", file=sys.stderr, flush=True)
    side = collect([start(args.config, args.batches, args.repeats, 1) for _ in range(cores)])
    rows.append({"layout": f"{cores} runs x 1 thread", "runs": cores, "threads": 1,
                 "img_s_each": [r["engine_img_s"] for r in side],
                 "img_s_total": sum(r["engine_img_s"] for r in side)})
    ratio = rows[1]["img_s_total"] / rows[0]["img_s_total"]
    doc = {"cpu": cpu(), "cores": cores, "config": args.config, "batches": args.batches, "repeats": args.repeats,
           "rows": rows, "side_by_side_over_one_run": ratio}
    if args.json:
        print(json.dumps(doc))
        return
    print(f"CPU: {doc['cpu'].get('model', '?')} ({', '.join(doc['cpu'].get('flags', []) or []) or 'no flags'}), "
          f"{cores} cores; {args.config}, PGD-10 AT, best of {args.repeats} epochs of {args.batches} batches")
    print(f"{'layout':<22} {'img/s each':>22} {'img/s machine':>14}")
    for r in rows:
        each = ", ".join(f"{v:.1f}" for v in r["img_s_each"])
        print(f"{r['layout']:<22} {each:>22} {r['img_s_total']:>14.1f}")
    print(f"side by side / one run: {ratio:.2f}x")


if __name__ == "__main__":
    main()
