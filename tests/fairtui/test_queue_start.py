"""Starting a queued run is a recorded transition: a worker killed at any point of a start never leads
to a second engine for the run, and a start that never happened is made by the next worker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairtui.launch.launcher import GpuChoice, start_engine
from fairtui.runs.home import EngineRunning
from fairtui.launch.queue import LocalQueue
from fairtui.runs.runfolder import RunView, engine_starting
from fairtui.runs.synthetic import make_run
from tests.conftest import HANG_S, engine_env

# Stands in for `python -m engine train RUN`: records each start, then waits until stopped.
FAKE_ENGINE = """
import os, sys, time
run = sys.argv[2]
with open(os.path.join(run, "fake-engine.starts"), "a") as fh:
    fh.write(f"{os.getpid()}\\n")
end = time.time() + 1800
while time.time() < end and not os.path.exists(os.path.join(run, "stop.requested")):
    time.sleep(0.05)
"""

# A queue worker's tick, killed (SIGKILL, nothing cleaned up) right after the step named in argv[2].
WORKER = """
import json, os, signal, sys
from pathlib import Path
from fairtui.launch import queue
from fairtui.launch.launcher import start_engine

home, point, fake = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
os.chdir(fake)  # engines started from here run the fake engine package
queue._fault_point = lambda step: os.kill(os.getpid(), signal.SIGKILL) if step == point else None
calls = []

def start(run_dir, gpus):
    calls.append(run_dir.name)
    return start_engine(run_dir, gpus)

queue.LocalQueue(home).tick(start)
print(json.dumps(calls))
"""


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    package = tmp_path / "fake" / "engine"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(FAKE_ENGINE)
    (tmp_path / "worker.py").write_text(WORKER)
    return tmp_path / "fake"


def _worker(tmp_path: Path, home: Path, point: str, fake: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(tmp_path / "worker.py"), str(home), point, str(fake)],
                          capture_output=True, text=True, timeout=HANG_S, env=engine_env())


def _starts(run: Path, at_least: int) -> list[str]:
    path = run / "fake-engine.starts"
    end = time.time() + HANG_S
    while time.time() < end and (not path.exists() or len(path.read_text().split()) < at_least):
        time.sleep(0.05)
    return path.read_text().split() if path.exists() else []


def _stop(run: Path) -> None:
    (run / "stop.requested").touch()
    end = time.time() + HANG_S
    while time.time() < end and engine_starting(run):
        time.sleep(0.05)


@pytest.mark.parametrize("point", ["starting", "spawned", "pid", "running"])
def test_a_worker_killed_at_each_point_of_a_start_never_starts_the_run_twice(tmp_path, fake, point):
    home = tmp_path / "home"
    run = make_run(home, "20260101-000000-queued", name="q", status="queued")
    LocalQueue(home).submit(run, GpuChoice.parse("cpu"))
    first = _worker(tmp_path, home, point, fake)
    assert first.returncode == -9, first.stderr  # killed where asked
    assert [e.get("state") for e in json.loads((home / "queue.json").read_text())] == ["starting"]
    second = _worker(tmp_path, home, "none", fake)
    assert second.returncode == 0, second.stderr
    try:
        # killed before its engine started: the next worker starts it; after: it only finishes the start
        assert json.loads(second.stdout) == (["20260101-000000-queued"] if point == "starting" else [])
        assert len(_starts(run, 1)) == 1
        assert json.loads((home / "queue.json").read_text()) == []
        assert RunView.load(run).status() == "running" and not (run / "queued").exists()
        # a third tick, or any start, finds the engine: nothing starts again
        assert json.loads(_worker(tmp_path, home, "none", fake).stdout) == []
        time.sleep(0.5)
        assert len(_starts(run, 1)) == 1
    finally:
        _stop(run)


def test_a_second_engine_for_a_run_is_refused_while_the_first_lives(tmp_path, fake, monkeypatch):
    run = make_run(tmp_path / "home", "20260101-000000-twice", name="t", status="queued")
    monkeypatch.chdir(fake)
    start_engine(run, GpuChoice.parse("cpu"))
    try:
        assert _starts(run, 1) and engine_starting(run)
        with pytest.raises(EngineRunning, match="already trains it"):
            start_engine(run, GpuChoice.parse("cpu"))
    finally:
        _stop(run)
    assert not engine_starting(run)
    assert len(_starts(run, 1)) == 1


def test_deleting_a_queued_run_cancels_its_queue_entry_from_the_cli_as_from_the_app(tmp_path):
    from tests.conftest import fairtui_cmd

    home = tmp_path / "home"
    run = make_run(home, "20260101-000000-queuedd", name="waiting", status="queued")
    other = make_run(home, "20260101-000001-queuedd", name="other", status="queued")
    queue = LocalQueue(home)
    queue.submit(run, GpuChoice.parse("cpu"))
    queue.submit(other, GpuChoice.parse("cpu"))
    deleted = fairtui_cmd("rm", run.name, "--yes", home=home)
    assert deleted.returncode == 0, deleted.stderr
    assert not run.exists() and [e["run_id"] for e in queue.entries()] == [other.name]


def test_resume_follows_one_rule_from_the_cli_and_the_app(tmp_path):
    """control.check_resumable: a queued run is not started a second time by `resume`, a completed one
    has nothing to resume (exit 0), and the app's `r` applies the same rule."""
    from fairtui.launch.control import ControlError, NothingToDo, queue_resume
    from tests.conftest import fairtui_cmd

    home = tmp_path / "home"
    queued = make_run(home, "20260101-000000-rrqueue", name="waiting", status="queued")
    done = make_run(home, "20260101-000001-rrdone", name="done")
    queue = LocalQueue(home)
    queue.submit(queued, GpuChoice.parse("cpu"))
    again = fairtui_cmd("resume", queued.name, home=home)
    assert again.returncode == 2 and "queued already" in again.stderr
    assert [e["run_id"] for e in queue.entries()] == [queued.name] and not (queued / "engine.json").exists()
    finished = fairtui_cmd("resume", done.name, home=home)
    assert finished.returncode == 0 and "nothing to resume" in finished.stderr
    with pytest.raises(NothingToDo):
        queue_resume(done, queue)
    with pytest.raises(ControlError, match="queued already"):
        queue_resume(queued, queue)
    assert [e["run_id"] for e in queue.entries()] == [queued.name]


def test_a_rerun_is_a_new_queued_run_of_the_same_profile_name_tags_and_gpus(tmp_path):
    from fairtui.launch.control import queue_rerun
    from fairtui.launch.launcher import change_meta

    home = tmp_path / "home"
    first = make_run(home, "20260101-000000-rerun1", name="again", tags=("a", "b"))
    change_meta(first, lambda m: m.update(gpus="cpu"))
    queue = LocalQueue(home)
    second = queue_rerun(first, queue)
    from engine.contract.profile_io import load_profile

    assert second != first
    assert load_profile(second / "profile.toml").to_table() == load_profile(first / "profile.toml").to_table()
    meta = json.loads((second / "meta.json").read_text())
    assert (meta["name"], meta["tags"], meta["gpus"]) == ("again", ["a", "b"], "cpu")
    assert [(e["run_id"], e["gpus"]) for e in queue.entries()] == [(second.name, "cpu")]
    assert RunView.load(second).status() == "queued"


@pytest.mark.parametrize("point", ["starting", "spawned"])
def test_a_start_cut_by_an_interrupt_then_cancelled_leaves_no_false_queued_mark(tmp_path, monkeypatch, point):
    """Ctrl-C inside a tick (a sweep's or a study's driver ticks its queue), then the stop cancels the run's entry:
    cut after its engine was spawned, the start is finished (the run is not left marked queued while its engine
    trains it); cut before, the run stays queued for `fairtui resume`."""
    from fairtui.launch import queue as queue_module

    home = tmp_path / "home"
    run = make_run(home, "20260101-000000-cutcut", status="running")
    queue = LocalQueue(home)
    queue.submit(run, GpuChoice.parse("cpu"))

    def start(run_dir, gpus):  # an engine that started: it wrote engine.json (and was then left to train)
        (run_dir / "engine.json").write_text(json.dumps({"pid": 1, "started": time.time() + 1}))
        return None

    def fault(step):
        if step == point:
            raise KeyboardInterrupt

    monkeypatch.setattr(queue_module, "_fault_point", fault)
    with pytest.raises(KeyboardInterrupt):
        queue.tick(start)
    assert (run / "queued").exists() and queue.entries()[0]["state"] == "starting"
    assert queue.cancel(run.name) and not queue.entries()
    assert (run / "queued").exists() == (point == "starting")


def test_a_cpu_slot_is_free_when_the_engine_process_has_exited_not_when_it_recorded_its_end(tmp_path):
    """#83 item 7: an engine that has written run_finished still holds its core for the seconds until it exits
    (its last writes, the interpreter's exit): the queue counts its slot until the engine's lock is released."""
    from engine.contract.locks import try_lock
    from engine.contract.protocol import ENGINE_LOCK

    home = tmp_path / "home"
    run_dir = make_run(home, "20260101-000000-done00", status="completed")
    (run_dir / "engine.json").write_text(json.dumps({"pid": 1, "started": time.time()}))
    (run_dir / "meta.json").write_text(json.dumps({"run_id": run_dir.name, "gpus": "cpu"}))
    queue = LocalQueue(home)
    assert queue.usage()[1] == 0  # ended and exited: no slot
    held = try_lock(run_dir / ENGINE_LOCK)  # the engine process, still alive after its run_finished
    try:
        assert RunView.load(run_dir).finished is not None
        assert queue.usage()[1] >= 1
    finally:
        held.close()
    assert queue.usage()[1] == 0


def test_a_queue_entry_that_cannot_start_fails_alone_and_the_queue_goes_on(tmp_path):
    """#83 item 3: a queued run whose start raises (a device string no machine has) ends failed with its reason; the
    home's other entries start in the same tick, and later ticks do not raise."""
    home = tmp_path / "home"
    bad = make_run(home, "20260101-000000-bad000", status="stopped")
    good = make_run(home, "20260101-000001-good00", status="stopped")
    queue = LocalQueue(home)
    queue.submit(bad, None, pool=["x;touch PWN"])
    queue.submit(good, GpuChoice(cpu=True))
    started = []

    def start(run_dir, gpus):
        if run_dir == bad:
            raise ValueError("no such device")
        started.append(run_dir.name)
        return None

    assert queue.tick(start) == [good.name]
    assert started == [good.name] and not queue.holds(bad.name) and not (bad / "queued").exists()
    end = RunView.load(bad).finished
    assert end["status"] == "failed" and end["error"].startswith("the queue could not start it: ")
    assert queue.tick(start) == []  # nothing left, nothing raised
