"""The run history at scale: `fairtui ls --json`, `compare` and `--help` over 10,000 runs.

    python benchmarks/bench_history.py [--runs 10000] [--epochs 10] [--home DIR] [--unindexed 5000]

Creates a synthetic history (run folders with realistic events.jsonl files, then the
index by `fairtui reindex`) unless DIR already holds one, and prints the median wall
time of each command over 5 runs, each a fresh process as a user would start it.
Targets on this machine: ls < 0.3 s, compare < 0.5 s, --help < 0.3 s.

``--unindexed N`` also times the first `ls` on a home of N run folders that no index lists
yet (a home copied from another machine, a lost runs.json): it indexes them all, so it is
timed once per fresh copy (3 copies), and must grow linearly with N.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(home: Path, runs: int, epochs: int) -> None:
    from fairtui.runs.synthetic import make_run

    t0 = time.time()
    for i in range(runs):
        make_run(home, f"20260101-{i:06d}-bench", name=f"run{i}", method=("cfa", "frl", "wat")[i % 3],
                 epochs=epochs, seed=i % 3, t0=t0 + i)
    subprocess.run([sys.executable, "-m", "fairtui.cli", "reindex", "--home", str(home)], check=True, cwd=ROOT)


def timed(args: list[str], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fairtui.cli", *args], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def first_ls(runs: int, epochs: int) -> float:
    """The median over 3 fresh homes of the first `ls` (the index is built by it, not by `reindex`)."""
    import shutil

    from fairtui.runs.synthetic import make_run

    times = []
    for _ in range(3):
        home = Path(tempfile.mkdtemp(prefix="fairtui-bench-unindexed-"))
        for i in range(runs):
            make_run(home, f"20260101-{i:06d}-new", name=f"run{i}", epochs=epochs, seed=i % 3, t0=1.7e9 + i)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fairtui.cli", "ls", "--home", str(home)], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
        shutil.rmtree(home)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--unindexed", type=int, default=0)
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="fairtui-bench-"))
    if not (home / "runs.json").exists():
        t = time.perf_counter()
        build(home, args.runs, args.epochs)
        print(f"built {args.runs} runs in {time.perf_counter() - t:.1f} s at {home}", file=sys.stderr)
    size = (home / "runs.json").stat().st_size / 1e6
    rows = [
        ("fairtui --help", timed(["--help"]), 0.3),
        ("fairtui ls --json", timed(["ls", "--json", "--home", str(home)]), 0.3),
        ("fairtui ls (table, 50 rows)", timed(["ls", "--home", str(home)]), None),
        ("fairtui compare (2 runs)", timed(["compare", "20260101-000001-bench", "20260101-000002-bench",
                                            "--home", str(home)]), 0.5),
        ("fairtui compare --json (2 runs)", timed(["compare", "20260101-000001-bench", "20260101-000002-bench",
                                                   "--json", "--home", str(home)]), 0.5),
    ]
    if args.unindexed:
        rows.append((f"first fairtui ls, {args.unindexed} unindexed runs", first_ls(args.unindexed, args.epochs),
                     None))
    print(f"{args.runs} runs, index {size:.1f} MB, median of 5 fresh processes")
    print("| command | wall time (s) | target (s) |")
    print("|---|---|---|")
    for name, seconds, target in rows:
        print(f"| {name} | {seconds:.3f} | {target if target is not None else '-'} |")


if __name__ == "__main__":
    main()
