"""The terminal app under load: start-up with a 1,000-run (or 10,000-run) index, and a run streaming 50
epochs per second.

    python benchmarks/bench_app.py [--runs 1000] [--rate 50] [--seconds 10]
    python benchmarks/bench_app.py --runs 10000 --seconds 0     # a long history; no streaming

Headless (Textual's run_test), as the tests drive it. Prints the time from
starting the app to the first screen of rows, counted whole in the status line
(target < 1 s), and to every row in the table (added in chunks after the first
screen, the app answering keys in between), and
for the run screen the lag between the last event written and the last event
shown while epochs are appended at `rate` per second (keeping up = a lag below
about a second, however long the run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def startup(home: Path, runs: int) -> tuple[float, float]:
    """Seconds from starting the app to its first screen of rows (the table has rows and the status
    line counts every run), and to every row in the table (the rest are added in chunks)."""
    from fairtui.app import make_app

    t = time.perf_counter()
    app = make_app(home=home, profiles_dir=home, gpu_inventory=lambda: [], poll_interval=1.0, queue_worker=False)
    first = None
    async with app.run_test(size=(120, 40)) as pilot:
        while True:
            table = app.screen.query("DataTable")
            count = table.first().row_count if table else 0
            if first is None and count and str(app.screen.query_one("#status-line").render()).startswith(
                    f"{runs} of {runs} runs"):
                first = time.perf_counter() - t
            if count == runs:
                return first or time.perf_counter() - t, time.perf_counter() - t
            await pilot.pause(0.01)


def writer(path: Path, rate: float, seconds: float, k: int, done: dict) -> None:
    template = json.loads(path.read_text().splitlines()[1])  # an epoch_end
    seq = len(path.read_text().splitlines())
    n = int(rate * seconds)
    start = time.perf_counter()
    with open(path, "a") as fh:
        for i in range(n):
            event = {**template, "seq": seq + i, "epoch": 1000 + i, "t": time.time()}
            fh.write(json.dumps(event) + "\n")
            fh.flush()
            delay = start + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    done["t"] = time.perf_counter()
    done["last_epoch"] = 1000 + n - 1


async def streaming(home: Path, rate: float, seconds: float) -> dict:
    from fairtui.app import make_app
    from fairtui.runs.synthetic import make_run

    run_dir = make_run(home, "20270101-000000-stream", name="stream", status="running", epochs=3)
    app = make_app(home=home, profiles_dir=home, gpu_inventory=lambda: [], poll_interval=0.2,
                   open_run=run_dir.name, queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        while not getattr(app.screen, "state", None) or not app.screen.state.epochs:
            await pilot.pause(0.05)
        done: dict = {}
        thread = threading.Thread(target=writer, args=(run_dir / "events.jsonl", rate, seconds, 10, done))
        thread.start()
        lags = []
        while thread.is_alive() or app.screen.state.epochs[-1]["epoch"] < done.get("last_epoch", 0):
            await pilot.pause(0.05)
            behind = (time.time() - app.screen.state.epochs[-1].get("t", time.time()))
            lags.append(behind)
        shown = time.perf_counter()
        thread.join()
        return {"epochs": int(rate * seconds), "final_lag_s": shown - done["t"], "max_lag_s": max(lags)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    from fairtui.runs.store import RunIndex
    from fairtui.runs.synthetic import make_run

    home = Path(tempfile.mkdtemp(prefix="fairtui-app-bench-"))
    for i in range(args.runs):
        make_run(home, f"20260101-{i:06d}-bench", name=f"run{i}", epochs=5)
    RunIndex(home).reindex()
    cold = asyncio.run(startup(home, args.runs))
    warm = asyncio.run(startup(home, args.runs))
    print("| measure | value | target |")
    print("|---|---|---|")
    for label, (first, every) in (("cold", cold), ("warm", warm)):
        print(f"| start to the first screen of rows, {args.runs} runs ({label}) | {first:.2f} s | < 1 s |")
        print(f"| start to all {args.runs} rows in the table ({label}) | {every:.2f} s | lazily, after the first |")
    if args.seconds <= 0:
        return
    stream = asyncio.run(streaming(home, args.rate, args.seconds))
    print(f"| {stream['epochs']} epochs at {args.rate:.0f}/s: lag after the last write | {stream['final_lag_s']:.2f} s "
          "| < 1 s |")
    print(f"| {stream['epochs']} epochs at {args.rate:.0f}/s: worst lag while streaming | {stream['max_lag_s']:.2f} s "
          "| bounded |")


if __name__ == "__main__":
    main()
