"""Reading a run with a very long event stream: time and peak memory of `fairtui show` and of the app's run screen.

    python benchmarks/bench_long_stream.py [--epochs 229000] [--classes 10] [--dir DIR]

Writes (once, into ``--dir``, default a temporary folder) a home with one completed run whose stream holds
``--epochs`` small epochs of ``--classes`` classes in the engine's line format (the outside probe's shape: 229,000
epochs, about 200 MB), and a second run of 300 epochs of 100 classes (the README's 100-class case). For each, in a
fresh process: the first `fairtui show` (no stored fold: the stream is folded), a second one (from the fold it
stored), the app's run screen's load (the run's fold, the replay it draws from, fed to the screen's state), and
the screen itself opened in a started app (headless, 120x40) until its title and curves are drawn.
Prints a table of seconds and peak resident MiB. The target (#55): every row within 2 s and 300 MB on a quiet
machine, whatever the number of epochs.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_run(home: Path, run_id: str, epochs: int, k: int) -> Path:
    """A completed run folder whose stream is written as the engine writes it (compact JSON, one line an
    event), without an engine: minutes of writing instead of days of training."""
    from engine.contract.config import Profile
    from engine.contract.profile_io import dumps_profile

    run = home / "runs" / run_id
    if (run / "events.jsonl").exists():
        return run
    run.mkdir(parents=True)
    profile = Profile(name=f"long-{k}")
    (run / "profile.toml").write_text(dumps_profile(profile))
    (run / "meta.json").write_text(json.dumps({"run_id": run_id, "name": f"long-{k}", "tags": [],
                                               "created": time.time()}))
    rng, t0, seq = random.Random(0), time.time(), 0
    names = [f"c{i}" for i in range(k)]

    def line(kind: str, **payload) -> bytes:
        nonlocal seq
        seq += 1
        event = {"v": 1, "seq": seq, "t": t0 + seq, "run_id": run_id, "type": kind, **payload}
        return (json.dumps(event, separators=(",", ":")) + "\n").encode()

    with open(run / "events.jsonl", "wb") as fh:
        fh.write(line("run_started", config=profile.to_table(), num_classes=k, class_names=names, device="cpu"))
        for epoch in range(1, epochs + 1):
            per = [round(rng.random(), 3) for _ in range(k)]
            fh.write(line("epoch_end", epoch=epoch, epochs=epochs, lr=0.1, time_s=1.0,
                          train={"loss": 1.0, "clean_acc": 0.8, "robust_acc": 0.4},
                          val={"robust_acc_per_class": per, "avg_robust": sum(per) / k, "worst_robust": min(per)},
                          method_state={}))
        fh.write(line("run_finished", status="completed"))
    return run


# The run screen as a user meets it: the app started on the home (120x40, headless), then the run opened; timed
# from opening it to its title saying "completed" and its curves drawn (the curves are drawn at most every 0.5 s)
SCREEN = """import asyncio, resource, sys, time
from pathlib import Path
from fairtui.app import make_app
from fairtui.app.screens.run import RunScreen

async def go():
    app = make_app(home=Path({home!r}), profiles_dir=Path({home!r}), gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.0)
        t = time.perf_counter()
        app.push_screen(RunScreen({run_id!r}))
        while time.perf_counter() - t < 600:
            await pilot.pause(0.02)
            screen = app.screen
            if ("completed" in str(screen.query_one("#run-title").render())
                    and not getattr(screen, "_plot_pending", True)):
                return time.perf_counter() - t
        raise SystemExit("the run screen was not drawn in 600 s")

seconds = asyncio.run(go())
print("MEASURED", seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)
"""


def measure(what: str, home: Path, run_id: str) -> dict:
    """One measurement in a fresh process: seconds and peak resident MiB."""
    code = {
        "show": f"from fairtui.cli import main; import sys; sys.argv = ['fairtui', 'show', {run_id!r}, '--home', "
                f"{str(home)!r}]\ntry:\n    main()\nexcept SystemExit:\n    pass",
        "app": "from fairtui.runs.digest import replay; from fairtui.runs.runfolder import RunView; "
               "from fairtui.runs.runstate import RunState\n"
               f"from pathlib import Path; view = RunView.load(Path({str(home / 'runs' / run_id)!r})); state = RunState(run_id={run_id!r})\n"
               "for event in replay(view.digest):\n    state.ingest(event)\n"
               "print('epochs held', len(state.epochs), file=sys.stderr)",
        "screen": SCREEN.format(home=str(home), run_id=run_id),
    }[what]
    # the screen keeps its own clock (from opening the screen in a started app to its curves drawn)
    wrapped = code if what == "screen" else (
        "import resource, sys, time\nt = time.perf_counter()\n" + code +
        "\nprint('MEASURED', time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "
        "file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", wrapped], capture_output=True, text=True, cwd=ROOT)
    line = next((ln for ln in out.stderr.splitlines() if ln.startswith("MEASURED")), None)
    if line is None:
        raise SystemExit(f"{what} failed:\n{out.stderr[-2000:]}")
    _, seconds, mib = line.split()
    return {"seconds": float(seconds), "peak_mib": float(mib)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=229_000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--dir", type=Path, help="where the home is written (kept; default: a temporary folder)")
    args = ap.parse_args()
    if args.epochs < 1 or args.classes < 2:
        ap.error("--epochs must be 1 or more and --classes 2 or more")
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        home = (args.dir or Path(tmp)) / "home"
        shapes = [("20261127-000000-long01", args.epochs, args.classes), ("20261127-000000-wide01", 300, 100)]
        print("| stream | MB | what | seconds | peak MiB |\n|---|---|---|---|---|")
        for run_id, epochs, k in shapes:
            run = write_run(home, run_id, epochs, k)
            for stored in (run / "digest.json", home / ".cache" / "digests" / f"{run_id}.json"):
                stored.unlink(missing_ok=True)  # the first show folds the stream
            size = (run / "events.jsonl").stat().st_size / 1e6
            for label, what in (("first show", "show"), ("second show", "show"), ("app run screen's load", "app"),
                                ("app run screen, opened and drawn", "screen")):
                m = measure(what, home, run_id)
                print(f"| {epochs} epochs x {k} classes | {size:.0f} | {label} | {m['seconds']:.2f} | "
                      f"{m['peak_mib']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
