"""A run with a very long event stream: `show`, `tag`, `ls` and the app's run screen on a 200 MB events.jsonl.

    python benchmarks/bench_stream.py [--mb 200] [--home DIR] [--distinct]

The run is a long CIFAR-100-sized one (100 classes, 300 epochs with their per-class numbers and
method state) evaluated many times: `eval_result` events at 24 settings (3 checkpoints, 4 attacks,
2 eps), repeated until the stream reaches the size asked for. Each command is a fresh process, as a
user starts it; its wall time and peak memory (max RSS) are printed. The stream is written through
the engine's EventWriter, which keeps the run's fold as it writes (``digest.json``); `show` is also timed
without that file, as for a stream written before the engine kept one (the stream folded once).
The app opens the run screen headless (Textual's run_test) and is timed until the screen shows the
run, then from `q` until the app has exited.
Targets: every command after the first below 1 s and 300 MB; `q` quits within 1 s.

``--distinct`` builds a stream in which no event repeats another (every epoch its own number, every
evaluation its own eps), as a long real run writes: nothing folds away, and the targets there (issue
#37, item 6) are `show`, `compare` and `export` below 1 s, the app's run screen below 2 s, memory below
200 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUN_ID = "20270101-000000-longstream"


def build(home: Path, mb: float) -> Path:
    from engine.contract.events import EventWriter
    from engine.contract.results import requested_setting
    from fairtui.runs.synthetic import make_run

    k, epochs = 100, 300
    run_dir = make_run(home, RUN_ID, name="long", method="cfa", epochs=epochs, k=k)
    table = json.loads((run_dir / "events.jsonl").read_text().splitlines()[0])["config"]
    rng = random.Random(0)
    path = run_dir / "events.jsonl"
    target = mb * 1e6
    writer = EventWriter(path, RUN_ID)  # as the engine writes: the stream and the fold it keeps
    while path.stat().st_size < target:
        for ckpt in ("best", "last", "ema"):
            for attack in ("pgd20", "cw20", "aa", "clean"):
                for eps in (None, 4 / 255):
                    clean = [round(rng.random(), 4) for _ in range(k)]
                    robust = [round(rng.random() * 0.6, 4) for _ in range(k)]
                    setting = requested_setting(table, attack, eps=eps)
                    writer.emit("eval_result", split="test", checkpoint=ckpt, epoch=epochs, attack=attack,
                                eps=setting.get("eps"), n_per_class=0, setting=setting,
                                clean_acc_per_class=clean, robust_acc_per_class=robust, avg_clean=sum(clean) / k,
                                avg_robust=sum(robust) / k, worst_robust=min(robust), cv=0.1, mcd=0.5)
    writer.emit("run_finished", status="completed")
    writer.close()
    return run_dir


def build_distinct(home: Path, mb: float) -> Path:
    """A stream whose events all differ, as a long real run's do: every epoch its own number (as a run of
    thousands of epochs, or of many resumes past each other, writes) with its own per-class numbers and
    a 100x100 matrix in its method state (Tian et al.'s confusion), and every evaluation at its own eps
    (an eps sweep), so that no fold can drop one event for a later one. Half of the bytes are epochs,
    half evaluations."""
    from engine.contract.events import EventWriter
    from engine.contract.results import requested_setting
    from fairtui.runs.synthetic import make_run

    k = 100
    run_dir = make_run(home, RUN_ID, name="long-distinct", method="tian", epochs=1, k=k, status="running")
    table = json.loads((run_dir / "events.jsonl").read_text().splitlines()[0])["config"]
    rng = random.Random(0)
    per_class = lambda centre: [round(min(1.0, max(0.0, rng.gauss(centre, 0.1))), 4) for _ in range(k)]  # noqa: E731
    path = run_dir / "events.jsonl"
    target = mb * 1e6
    epoch, sweep = 1, 0
    writer = EventWriter(path, RUN_ID)  # as the engine writes: the stream and the fold it keeps
    while path.stat().st_size < target:
        if path.stat().st_size < target / 2:
            epoch += 1
            confusion = [[rng.randrange(50) for _ in range(k)] for _ in range(k)]
            writer.emit("epoch_end", epoch=epoch, epochs=100000, lr=0.1, time_s=1.0,
                        train={"loss": rng.random(), "clean_acc": rng.random(), "robust_acc": rng.random(),
                               "clean_acc_per_class": per_class(0.8), "robust_acc_per_class": per_class(0.4)},
                        val={"clean_acc_per_class": per_class(0.8), "robust_acc_per_class": per_class(0.4)},
                        method_state={"beta_per_class": per_class(6.0), "confusion": confusion})
        else:
            sweep += 1
            eps = sweep / 100000
            setting = requested_setting(table, "pgd20", eps=eps)
            clean, robust = per_class(0.8), per_class(0.4)
            writer.emit("eval_result", split="test", checkpoint="best", epoch=epoch, attack="pgd20",
                        eps=setting.get("eps"), n_per_class=0, setting=setting, clean_acc_per_class=clean,
                        robust_acc_per_class=robust, avg_clean=sum(clean) / k, avg_robust=sum(robust) / k,
                        worst_robust=min(robust), cv=0.1, mcd=0.5,
                        confusion_matrix=[[rng.randrange(50) for _ in range(k)] for _ in range(k)])
    for ckpt in ("best", "last"):  # the run's own result, at its profile's settings (compare, export)
        setting = requested_setting(table, "pgd20")
        clean, robust = per_class(0.8), per_class(0.4)
        writer.emit("eval_result", split="test", checkpoint=ckpt, epoch=epoch, attack="pgd20",
                    eps=setting.get("eps"), n_per_class=0, setting=setting, clean_acc_per_class=clean,
                    robust_acc_per_class=robust, avg_clean=sum(clean) / k, avg_robust=sum(robust) / k,
                    worst_robust=min(robust), cv=0.1, mcd=0.5)
    writer.emit("run_finished", status="completed")
    writer.close()
    return run_dir


def measured(args: list[str]) -> tuple[float, float]:
    """Wall time (s) and peak RSS (MB) of one fresh process."""
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True); "
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, cwd=ROOT)
    seconds, rss_kb = out.stdout.split()
    return float(seconds), int(rss_kb) / 1024


APP = """
import asyncio, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from fairtui.app import make_app
from fairtui.app.screens.run import RunScreen

async def main(home, run_id, quit_early):
    app = make_app(home=Path(home), profiles_dir=Path(home), gpu_inventory=lambda: [], poll_interval=1.0,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        t = time.perf_counter()
        app.push_screen(RunScreen(run_id))
        if quit_early:  # `q` while the screen still loads
            await pilot.pause(0.5)
            t = time.perf_counter()
            await pilot.press("q")
            shown = float("nan")
        while not quit_early and not (isinstance(app.screen, RunScreen) and app.screen.state.results):
            await pilot.pause(0.02)
        if not quit_early:
            shown = time.perf_counter() - t
            t = time.perf_counter()
            await pilot.press("q")
    quit_s = time.perf_counter() - t
    print(shown, quit_s, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[4] == "1"))
"""


def app_times(home: Path, quit_early: bool = False) -> tuple[float, float, float]:
    out = subprocess.run([sys.executable, "-c", APP, str(home), RUN_ID, str(ROOT), "1" if quit_early else "0"],
                         capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    shown, quit_s, rss = out.stdout.split()
    return float(shown), float(quit_s), float(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--distinct", action="store_true",
                        help="every event differs (epochs and evaluation settings): nothing folds away")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="fairtui-bench-stream-"))
    run_dir = home / "runs" / RUN_ID
    if not run_dir.exists():
        t = time.perf_counter()
        (build_distinct if args.distinct else build)(home, args.mb)
        print(f"built a {(run_dir / 'events.jsonl').stat().st_size / 1e6:.0f} MB stream in "
              f"{time.perf_counter() - t:.0f} s at {home}", file=sys.stderr)
    cli = [sys.executable, "-m", "fairtui.cli"]
    kept = run_dir / "digest.json"  # the fold the engine keeps as it writes (engine.contract.digest)
    shutil.rmtree(home / ".cache", ignore_errors=True)
    kept.rename(kept.with_suffix(".aside"))
    rows = [("fairtui show, no digest.json (a stream written before the engine kept its fold: folded once)",
             *measured([*cli, "show", RUN_ID, "--home", str(home)]))]
    kept.with_suffix(".aside").rename(kept)
    shutil.rmtree(home / ".cache", ignore_errors=True)
    for name, command in (("fairtui show", ["show", RUN_ID]), ("fairtui show --json", ["show", RUN_ID, "--json"]),
                          ("fairtui show --all", ["show", RUN_ID, "--all"]),
                          ("fairtui compare (the run with itself)", ["compare", RUN_ID, RUN_ID]),
                          ("fairtui export", ["export", RUN_ID, "-o", os.devnull]),
                          ("fairtui tag", ["tag", RUN_ID, "bench"]), ("fairtui ls", ["ls"])):
        rows.append((name, *measured([*cli, *command, "--home", str(home)])))
    _, early_quit, _ = app_times(home, quit_early=True)
    shown, quit_s, rss = app_times(home)
    size = (run_dir / "events.jsonl").stat().st_size / 1e6
    kind = "distinct events" if args.distinct else "repeated evaluations"
    print(f"one run, events.jsonl {size:.0f} MB of {kind}; each command a fresh process")
    print("| what | wall time (s) | peak memory (MB) |")
    print("|---|---|---|")
    for name, seconds, mb in rows:
        print(f"| {name} | {seconds:.2f} | {mb:.0f} |")
    print(f"| app: run screen shown | {shown:.2f} | {rss:.0f} (whole app) |")
    print(f"| app: `q` until exited | {quit_s:.2f} | - |")
    print(f"| app: `q` while the screen folds the stream, until exited | {early_quit:.2f} | - |")


if __name__ == "__main__":
    main()
