"""What a small CPU run costs before it trains: `import torch`, `torch._dynamo`, and a tiny digits run end to end.

    python benchmarks/bench_startup.py [--repeats 3]

Each row is a fresh process, as the engine is started by `fairtui run` and by the tests; the table gives the
median CPU time (user + system) and wall time over the repeats, and whether the process imported torch._dynamo.
The tiny run is the tests' profile (tests/conftest.py's TINY: digits, small_cnn, 300 training images, 2 epochs,
PGD-5), trained once with the engine's SGD on the CPU (engine/training/optim.py) and once with torch.optim.SGD in its place,
whose first step imports torch._dynamo. Run it on an otherwise idle machine, one thread per process.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# run the engine as `python -m engine train RUN` does, and say at the end whether torch._dynamo was imported
ENGINE = """
import runpy, sys
run_dir, optimizer = sys.argv[1], sys.argv[2]
if optimizer == "torch":
    import torch
    import engine.training.trainer
    engine.training.trainer.new_sgd = lambda params, device, **hyper: torch.optim.SGD(params, **hyper)
sys.argv = ["engine", "train", run_dir]
try:
    runpy.run_module("engine", run_name="__main__")
except SystemExit as end:
    code = end.code
print("dynamo", "torch._dynamo" in sys.modules, "exit", code)
"""
IMPORT = "import sys\n{}\nprint('dynamo', 'torch._dynamo' in sys.modules)"


def measure(args: list[str], env: dict) -> tuple[float, float, bool]:
    """CPU seconds (user + system) and wall seconds of one process, and whether it imported torch._dynamo."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or "exit 1" in proc.stdout or "exit 2" in proc.stdout:
        sys.exit(f"failed: {' '.join(args)}\n{proc.stdout}{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, "dynamo True" in proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    from tests.conftest import TINY, make_run_dir

    rows = [("python -c 'import torch'", lambda _: [sys.executable, "-c", IMPORT.format("import torch")]),
            ("python -c 'import torch, torch._dynamo'",
             lambda _: [sys.executable, "-c", IMPORT.format("import torch, torch._dynamo")])]
    for optimizer, label in (("engine", "tiny digits run, engine SGD (the engine on the CPU)"),
                             ("torch", "tiny digits run, torch.optim.SGD")):
        rows.append((label, lambda run_dir, o=optimizer: [sys.executable, "-c", ENGINE, str(run_dir), o]))

    print(f"{args.repeats} fresh processes a row, median; one thread; {os.cpu_count()} cores\n")
    print("| process | CPU s | wall s | imports torch._dynamo |")
    print("|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "tiny.toml"
        profile.write_text(TINY)
        for label, command in rows:
            results = []
            for i in range(args.repeats):
                run_dir = make_run_dir(Path(tmp), profile, name=f"run{len(results)}-{abs(hash(label))}-{i}")
                results.append(measure(command(run_dir), env))
                shutil.rmtree(run_dir)
            cpu = statistics.median(r[0] for r in results)
            wall = statistics.median(r[1] for r in results)
            print(f"| {label} | {cpu:.2f} | {wall:.2f} | {'yes' if results[0][2] else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
