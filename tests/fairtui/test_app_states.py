"""The app's screens for runs that do not train or have not started: an imported model, a queued run, and
the launch dialog's first view at 80x24 (Pilot)."""

import json
import os

from fairtui.app import make_app
from fairtui.app.widgets.plot import LinePlot
from fairtui.runs.synthetic import make_run
from tests.fairtui.test_app import FAKE_GPUS, engine_on_path, profiles, wait_until  # noqa: F401 (fixtures)
from tests.conftest import HANG_S


async def test_an_imported_runs_screen_shows_its_evaluations_and_no_training_plot(tmp_path):
    """An imported model never trains: its screen says so instead of 'waiting for the first epoch', and the
    bars show its test result."""
    home = tmp_path / "home"
    run_dir = make_run(home, "20260101-000000-1a1a1a", name="zoo-model", epochs=0, attacks=("pgd20",))
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    started = json.loads(lines[0])
    started["imported"] = {"kind": "state_dict", "path": "/models/net.pt", "sha256": "0" * 64}
    (run_dir / "events.jsonl").write_text("\n".join([json.dumps(started)] + lines[1:]) + "\n")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   open_run="20260101-000000-1a1a1a", queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "state", None) and app.screen.state.status == "imported")
        await pilot.pause(0.8)  # the plot redraws at most every 0.5 s
        plot = app.screen.query_one("#plot", LinePlot)
        assert plot.title.startswith("imported model: not trained here")
        assert "waiting" not in plot.title
        assert app.screen.state.latest_bars()[2].startswith("test pgd20 @ ")
        assert "imported" in str(app.screen.query_one("#run-title").render())


async def test_a_queued_run_says_what_it_waits_for_in_the_runs_table_and_on_its_screen(tmp_path, monkeypatch):
    from fairtui.launch.launcher import GpuChoice
    from fairtui.launch.queue import LocalQueue

    monkeypatch.setattr(LocalQueue, "usage", lambda self: ({"cpu": 2}, os.cpu_count()))
    monkeypatch.setattr(LocalQueue, "tick", lambda self, start=None: [])  # the CPU stays busy
    home = tmp_path / "home"
    run = make_run(home, "20260101-000000-q1q1q1", name="cifar10-cpu-quick-trades", status="running", epochs=0)
    (run / "events.jsonl").write_text("")
    LocalQueue(home).submit(run, GpuChoice(cpu=True))
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        line = app.screen.query_one("#status-line")
        await wait_until(pilot, lambda: "waits for cpu" in str(line.render()), timeout=HANG_S)
        cores = os.cpu_count()
        reason = f"waits for cpu: {cores} of {cores} cores busy, needs {cores}, 0 ahead (train.threads)"
        # the reason whole, the name cut to the 78 columns inside the line's padding (the walk's line ended on
        # "(train.threads): cifar10-cpu-q" cut by the terminal)
        said = str(line.render())
        assert said.startswith(reason + ": cifar10-") and said.endswith("…") and len(said) == 78
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "RunScreen", timeout=HANG_S)
        summary = app.screen.query_one("#run-summary")
        await wait_until(pilot, lambda: "queued: waits for cpu" in str(summary.render()), timeout=HANG_S)


def test_a_queued_runs_line_keeps_its_reason_whole_and_cuts_the_name_to_the_width():
    from fairtui.app.screens.runs_table import wait_line

    reason = "waits for cpu: 2 of 2 cores busy, needs 1, 0 ahead (train.threads)"  # 66 characters
    assert wait_line(reason, "quick", 80) == reason + ": quick"  # 73 of the 78 columns inside the padding
    assert wait_line(reason, "cifar10-cpu-quick-trades", 80) == reason + ": cifar10-c…"  # 78 exactly
    assert wait_line(reason, "cifar10-cpu-quick-trades", 120) == reason + ": cifar10-cpu-quick-trades"
    assert wait_line(reason, "x" * 20, 76) == reason + ": xxxxx…"  # six columns left: five letters and the cut
    assert wait_line(reason, "x" * 20, 75) == reason  # five: no name, and no dangling colon
    assert wait_line(reason, "x" * 20, 40) == reason  # narrower than the reason: the terminal cuts it, as before


async def test_the_launch_dialog_shows_the_gpus_and_the_profiles_settings_at_80x24(tmp_path, profiles):
    """The GPU choice is in view beside the profile list without scrolling, and the highlighted profile's
    description, method and epochs are shown."""
    app = make_app(home=tmp_path / "home", profiles_dir=profiles, gpu_inventory=lambda: FAKE_GPUS,
                   poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")
        await pilot.pause(0.3)
        gpus = app.screen.query_one("#gpus")
        fields = app.screen.query_one("#launch-fields")
        assert gpus.region.height > 0 and gpus.region.bottom <= fields.region.bottom  # visible, not below the fold
        assert "0 1/80 GiB 3% Fake GPU" in str(gpus.get_option_at_index(0).prompt)  # memory and load before the name
        info = str(app.screen.query_one("#profile-info").render())
        assert "pgd_at on digits / small_cnn, 2 epochs, eps 0.2" in info


APP_EVALUATE = """
import asyncio, json, sys
from pathlib import Path
from fairtui.app import make_app

async def main(home):
    app = make_app(home=Path(home), profiles_dir=Path(home), gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if app.screen.query("DataTable") and app.screen.query_one("DataTable").row_count == 1:
                break
        await pilot.press("e")
        for _ in range(200):
            await pilot.pause(0.05)
            if type(app.screen).__name__ == "EvalDialog":
                break
        print(json.dumps({"dialog": type(app.screen).__name__, "checkpoints": app.screen.checkpoints,
                          "torch": "torch" in sys.modules}))

asyncio.run(main(sys.argv[1]))
"""


def test_pressing_e_lists_the_checkpoints_without_importing_torch(tmp_path):
    """The evaluate dialog reads the checkpoint names from checkpoints/names.json: the app process never
    imports torch (nor loads a checkpoint) to offer them."""
    import subprocess
    import sys

    from tests.conftest import ROOT, engine_env

    home = tmp_path / "home"
    run = make_run(home, "20260101-000000-e1e1e1", name="done", epochs=2)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "names.json").write_text(json.dumps({"names": ["last", "best", "ema", "fawa"]}))
    out = subprocess.run([sys.executable, "-c", APP_EVALUATE, str(home)], capture_output=True, text=True, cwd=ROOT,
                         env=engine_env(), timeout=HANG_S)
    assert out.returncode == 0, out.stderr[-3000:]
    shown = json.loads(out.stdout.strip().splitlines()[-1])
    assert shown == {"dialog": "EvalDialog", "checkpoints": ["best", "last", "ema", "fawa"], "torch": False}


async def test_the_80x24_run_header_keeps_the_batch_count_and_its_time_left(tmp_path):
    """#73 item 7: at 80x24 the live run's line read "run ETA 1 h 05 min + test evaluation | train epoch 2:" and was
    cut there. It is now short enough to keep the batches and the epoch's time left beside the bar."""
    import time

    from fairtui.launch.launcher import hold_engine_lock

    home = tmp_path / "home"
    run = make_run(home, "20260101-000000-live01", name="live", status="running", epochs=1)
    (run / "engine.json").unlink(missing_ok=True)
    lock = hold_engine_lock(run)  # an engine at work: the run reads running
    now = time.time()
    (run / "progress.json").write_text(json.dumps({"phase": "train", "epoch": 2, "batch": 18, "batches": 313,
                                                   "started": now - 43.0, "t": now, "pid": os.getpid()}))
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False, open_run=run.name)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(pilot, lambda: type(app.screen).__name__ == "RunScreen", timeout=HANG_S)
            text = app.screen.query_one("#progress-text")
            await wait_until(pilot, lambda: "18/313" in str(text.render()), timeout=HANG_S)
            shown = str(text.render())
            assert "train epoch 2: 18/313, " in shown and " min" in shown.split("18/313")[1], shown
            assert text.region.right <= 80 and len(shown.rstrip()) <= text.region.width
    finally:
        lock.close()


async def test_the_run_screens_log_wraps_again_when_the_terminal_is_resized(tmp_path):
    """#73 item 7: after a resize the log kept the wraps of its old width (lines cut when narrower, half-empty
    when wider) until the screen was opened again. Its lines are now wrapped at the new width, none lost."""
    home = tmp_path / "home"
    make_run(home, "20260101-000000-wrap01", name="a-run-name-long-enough-to-make-its-log-lines-wrap", epochs=6)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False, open_run="20260101-000000-wrap01")

    def shown(log) -> tuple[int, str]:
        texts = [strip.text for strip in log.lines]
        return max(len(t.rstrip()) for t in texts), "".join(t.strip() for t in texts).replace(" ", "")

    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: type(app.screen).__name__ == "RunScreen", timeout=HANG_S)
        log = app.screen.query_one("#log")
        await wait_until(pilot, lambda: len(log.lines) >= 6, timeout=HANG_S)
        await pilot.pause(0.5)
        wide, text = shown(log)
        assert wide > 80  # the lines are longer than the narrow terminal
        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: shown(log)[0] <= log.scrollable_content_region.width, timeout=HANG_S)
        assert shown(log)[1] == text  # the same text, wrapped again
        narrow_lines = len(log.lines)
        await pilot.resize_terminal(200, 50)
        await wait_until(pilot, lambda: len(log.lines) < narrow_lines, timeout=HANG_S)
        assert shown(log) == (wide, text)
