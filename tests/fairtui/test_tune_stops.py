"""A tuning study under stops and faults (#55 items 2, 3 and 8): the driver's own stop is not a failure of the
trial, a trial that ended for the machine's reasons (a killed engine, a full disk) is resumed rather than
counted, SIGTERM or SIGHUP stops the driver as Ctrl-C does, and no run is left queued with nobody to start it."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import HANG_S, ROOT, TINY, engine_env, fairtui_cmd

optuna = pytest.importorskip("optuna")

from fairtui.tune import study as t  # noqa: E402
from fairtui.tune import driver as td  # noqa: E402
from fairtui.tune import space as ts  # noqa: E402
from fairtui.runs.runfolder import RunView  # noqa: E402

STUDY = ("--set", "train.epochs=2", "--space", "train.lr=0.02:0.1:log")


def _request(home: Path, profile: Path, name: str, epochs: int, trials: int = 1) -> t.Request:
    return t.Request(home=home, study=name, profile_path=str(profile), space=[ts.parse_dimension(
        "train.lr=0.02:0.1")], base=[f"train.epochs={epochs}"], trials=trials, objective=ts.Objective("avg_worst"),
        pruner="none", interval=0.1)


def _until(check, what: str) -> None:
    deadline = time.time() + HANG_S
    while not check():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _drive(driver: td.Driver) -> None:
    """The driver's loop over the trials it follows (what Driver._run does after adopting), to their end."""
    deadline = time.time() + HANG_S
    while driver.active:
        assert time.time() < deadline, "the trials did not end"
        driver.queue.tick()
        for number in list(driver.active):
            if driver._follow(number):
                del driver.active[number]
        time.sleep(0.1)


def _states(study) -> list[str]:
    return [tr.state.name for tr in study.get_trials()]


def test_the_drivers_own_stop_is_resumed_not_recorded_as_a_failure(tmp_path, tiny_profile):
    """The race the probe hit: `tune S --resume` adopts the trial while its engine still runs, then the engine
    ends `stopped` from the first driver's Ctrl-C. The trial's run resumes and the trial completes, one run."""
    home = tmp_path / "home"
    req = _request(home, tiny_profile(), "c1", epochs=3)
    study = t.create(req)
    first = td.Driver(study, req)
    first._start(study.ask())
    run_id = next(iter(first.active.values()))["run_id"]
    run_dir = home / "runs" / run_id
    first.queue.tick()
    _until(lambda: RunView.load(run_dir).status() == "running", "the engine to start")
    study2, req2 = t.load(home, "c1")
    second = td.Driver(study2, req2)
    for frozen in study2.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        second._adopt(frozen)  # still running: followed, not resumed
    first.stop()  # Ctrl-C of the first driver
    _until(lambda: RunView.load(run_dir).status() != "running", "the engine to stop")
    assert RunView.load(run_dir).status() == "stopped"
    _drive(second)
    assert _states(study2) == ["COMPLETE"]
    assert study2.get_trials()[0].user_attrs["run_id"] == run_id
    assert t.DRIVER_STOPPED not in json.loads((run_dir / "meta.json").read_text())
    assert [p.name for p in (home / "runs").iterdir() if not p.name.startswith(".")] == [run_id]


def test_a_stop_by_hand_is_still_the_users_choice(tmp_path, tiny_profile):
    from fairtui.launch.control import stop_run

    home = tmp_path / "home"
    req = _request(home, tiny_profile(), "h1", epochs=30)
    study = t.create(req)
    driver = td.Driver(study, req)
    driver._start(study.ask())
    run_dir = home / "runs" / next(iter(driver.active.values()))["run_id"]
    driver.queue.tick()
    _until(lambda: RunView.load(run_dir).status() == "running", "the engine to start")
    stop_run(run_dir, wait=True)  # `fairtui stop RUN`: not the driver's
    _drive(driver)
    assert _states(study) == ["FAIL"]


def test_a_killed_engine_holds_its_trial_for_resume_and_the_resume_completes_it(tmp_path, tiny_profile,
                                                                                monkeypatch):
    """The engine is killed by something other than fairtui (SIGKILL to its group, as the OOM killer would)
    after its first epoch: the trial is not counted as failed nor replaced; `--resume` resumes its run from the
    checkpoint and the study ends with its budget."""
    from fairtui.launch.control import engine_processes

    home = tmp_path / "home"
    req = _request(home, tiny_profile(), "k2", epochs=3, trials=1)
    study = t.create(req)
    killed: list[str] = []
    real = td.Driver._follow

    def follow(self, number):
        run_dir = self.req.home / "runs" / self.active[number]["run_id"]
        if number == 0 and not killed and RunView.load(run_dir).epochs:
            group, pids = engine_processes(run_dir)
            os.killpg(group, signal.SIGKILL)
            _until(lambda: RunView.load(run_dir).status() == "lost", "the run to read lost")
            killed.append(run_dir.name)
        return real(self, number)

    monkeypatch.setattr(td.Driver, "_follow", follow)
    driver = td.Driver(study, req)
    driver.run()
    assert driver.held == {0: "its engine died with no end recorded"}
    assert _states(study) == ["RUNNING"]  # held: not failed, and no trial made in its place
    assert t.summary(study, req)["trials"][0]["state"] == "held"
    monkeypatch.setattr(td.Driver, "_follow", real)
    study2, req2 = t.load(home, "k2")
    td.Driver(study2, req2).run()
    trials = study2.get_trials()
    assert _states(study2) == ["COMPLETE"]
    assert trials[0].user_attrs["run_id"] == killed[0]
    view = RunView.load(home / "runs" / killed[0])
    assert [e["epoch"] for e in view.epochs] == [1, 2, 3]  # resumed from its checkpoint, every epoch once


def test_a_machine_reason_is_told_from_the_trials_own_failure(tmp_path):
    from engine.contract.atomic import _disk_full

    full = _disk_full(tmp_path / "ckpt.pt", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 10)
    view = lambda error: SimpleNamespace(finished={"status": "failed", "error": error})  # noqa: E731
    assert t.machine_reason(view(str(full)), "failed") == "the disk is full"
    assert t.machine_reason(view("OSError: [Errno 28] No space left on device"), "failed") == "the disk is full"
    assert t.machine_reason(SimpleNamespace(finished=None), "lost") == "its engine died with no end recorded"
    assert t.machine_reason(view("the training loss became nan at epoch 1"), "failed") is None
    assert t.machine_reason(view("stopped by a signal"), "stopped") is None


def test_sigterm_stops_the_driver_as_ctrl_c_does_and_resume_strands_nothing(tmp_path, tiny_profile):
    """SIGTERM (and SIGHUP, a closed terminal) once the trial's run is made: the driver exits 130 with its trial
    stopped or left queued for the study (it used to die, leaving the run queued with no one to start it);
    `--resume` completes the budget, every run once."""
    home = tmp_path / "home"
    for sig in (signal.SIGTERM, signal.SIGHUP):
        name = f"t{int(sig)}"
        cmd = [sys.executable, "-m", "fairtui.cli", "tune", str(tiny_profile()), *STUDY, "--trials", "1",
               "--study", name, "--pruner", "none", "--home", str(home)]
        driver = subprocess.Popen(cmd, cwd=ROOT, env=engine_env(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        _until(lambda: any(json.loads(m.read_text()).get("study") == name
                           for m in (home / "runs").glob("*/meta.json")) if (home / "runs").exists() else False,
               "the first trial's run")
        os.kill(driver.pid, sig)
        _, err = driver.communicate(timeout=HANG_S)
        assert driver.returncode == 130, err
        assert f"fairtui tune {name} --resume" in err
        proc = fairtui_cmd("tune", name, "--resume", "--json", home=home)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert [r["state"] for r in doc["trials"]] == ["complete"], (doc["trials"], proc.stderr)
        for row in doc["trials"]:
            assert RunView.load(home / "runs" / row["run_id"]).status() == "completed"


def test_a_run_left_queued_by_a_driver_that_is_gone_is_resumable_by_hand(tmp_path, tiny_profile):
    from fairtui.launch.control import ControlError, check_resumable
    from fairtui.launch.queue import LocalQueue

    home = tmp_path / "home"
    req = _request(home, tiny_profile(), "q1", epochs=1)
    study = t.create(req)
    driver = td.Driver(study, req)
    driver._start(study.ask())  # queued, not yet started (nobody ticked)
    run_dir = home / "runs" / next(iter(driver.active.values()))["run_id"]
    with pytest.raises(ControlError, match="queued already"):
        check_resumable(run_dir)  # the queue holds it: it starts when its device frees
    LocalQueue(home).cancel(run_dir.name)  # its driver ended (SIGTERM) and took it off the queue
    assert RunView.load(run_dir).status() == "queued"
    check_resumable(run_dir)  # stranded: `fairtui resume` may start it
    proc = fairtui_cmd("resume", run_dir.name, home=home)
    assert proc.returncode == 0, proc.stderr
    assert RunView.load(run_dir).status() == "completed"


def test_a_stop_that_lands_inside_a_start_waits_for_its_end_and_strands_nothing(tmp_path, tiny_profile, monkeypatch):
    """SIGTERM delivered just after the queue spawned a trial's engine, before it took the run off the queue (the
    window a loaded machine widens): it used to cut the start there, leaving the run marked queued with no queue
    entry while its engine trained it, and `--resume` waited on it for ever. The stop now comes at the end of
    the driver's step: the run is started, then stopped with its study, and `--resume` completes it."""
    from fairtui.launch import queue as queue_module
    from fairtui.cli.tune import _signals_interrupt

    home = tmp_path / "home"
    req = _request(home, tiny_profile(), "cut", epochs=2)
    study = t.create(req)
    driver = td.Driver(study, req)
    signalled = []

    def fault(step: str) -> None:
        if step == "spawned" and not signalled:
            signalled.append(step)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(queue_module, "_fault_point", fault)
    with pytest.raises(KeyboardInterrupt), _signals_interrupt(driver):
        driver.run()
    assert signalled
    driver.stop()
    (number, entry), = driver.active.items()
    run_dir = home / "runs" / entry["run_id"]
    assert not (run_dir / "queued").exists()  # the start was finished: its engine took the run off the queue
    assert all(e["run_id"] != entry["run_id"] for e in driver.queue.entries())
    _until(lambda: RunView.load(run_dir).status() != "running", "the trial's engine to stop")
    proc = fairtui_cmd("tune", "cut", "--resume", "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    assert [r["state"] for r in json.loads(proc.stdout)["trials"]] == ["complete"]


def test_a_trial_left_marked_queued_with_no_queue_entry_is_queued_again_by_its_driver(tmp_path, tiny_profile):
    """The state the cut start left (and a driver of an older fairtui may have left in a home): the run is marked
    queued, the queue holds no entry, no engine runs. The driver following it queues it again, so the trial ends;
    it used to wait on it for ever."""
    home = tmp_path / "home"
    req = _request(home, tiny_profile(), "stranded", epochs=1)
    study = t.create(req)
    driver = td.Driver(study, req)
    driver._start(study.ask())
    (entry,) = driver.active.values()
    assert driver.queue.cancel(entry["run_id"])
    run_dir = home / "runs" / entry["run_id"]
    assert RunView.load(run_dir).status() == "queued" and not driver.queue.holds(entry["run_id"])
    _drive(driver)
    assert _states(study) == ["COMPLETE"] and RunView.load(run_dir).status() == "completed"


def test_a_study_whose_start_is_gone_stops_in_one_line_without_spending_its_budget(tmp_path, tiny_profile):
    """#71 item 8: a fine-tune study's base run deleted (`rm --force`) while it was between trials: every trial would
    fail on the missing `method.init_from`. The driver stops before making the trial's run, and the trial does not
    count against the budget."""
    home = tmp_path / "home"
    base = tmp_path / "gone-base"  # the base run's folder, deleted
    profile = tiny_profile(name="frl.toml", base=TINY.replace('name = "pgd_at"', f'name = "frl"\ninit_from = "{base}"'))
    req = _request(home, profile, "ft", epochs=1, trials=3)
    study = t.create(req)
    with pytest.raises(ts.TuneError) as err:
        td.Driver(study, req).run()
    assert "ft: stopped before trial 0, whose start is gone" in str(err.value)
    assert "None of the budget was spent" in str(err.value) and "--resume" in str(err.value)
    assert not (home / "runs").exists() or not [p for p in (home / "runs").iterdir() if not p.name.startswith(".")]
    assert [tr.user_attrs.get("no_run") for tr in t.load(home, "ft")[0].get_trials()] == [True]


def test_a_journal_cut_to_half_takes_its_finished_runs_back_instead_of_training_them_again(tmp_path, tiny_profile):
    """The probe cut a study's journal to half its bytes: the resume trained the lost trials again and left their
    first runs as orphans. Runs of the study that its journal does not name are now taken back: a finished one as a
    trial with its parameters and result (the budget counts it, nothing is trained again), and one that did not end
    is tagged orphan and named, and not counted."""
    home = tmp_path / "home"
    made = fairtui_cmd("tune", str(tiny_profile()), "--set", "train.epochs=1", "--space", "train.lr=0.02:0.1",
                       "--trials", "4", "--study", "cut", "--pruner", "none", home=home)
    assert made.returncode == 0, made.stderr[-2000:]
    runs = sorted(p.name for p in (home / "runs").iterdir())
    assert len(runs) == 4
    journal = home / "studies" / "cut.journal"
    data = journal.read_bytes()
    journal.write_bytes(data[:len(data) // 2])
    left = {tr.user_attrs.get("run_id") for tr in t.load(home, "cut", to_run=False)[0].get_trials()} - {None}
    lost = sorted(set(runs) - left)
    assert len(lost) >= 2, lost  # the cut lost two trials' runs at least
    unended = home / "runs" / lost[-1]  # one of them as if its engine had died before its end
    stream = (unended / "events.jsonl").read_text().splitlines()
    (unended / "events.jsonl").write_text("\n".join(line for line in stream if '"epoch_end"' in line
                                                    or '"run_started"' in line) + "\n")
    resumed = fairtui_cmd("tune", "cut", "--resume", home=home)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    now = sorted(p.name for p in (home / "runs").iterdir())
    assert set(runs) <= set(now) and len(now) == 5  # one new run: for the one that did not end, not the others
    assert resumed.stderr.count("taken back") == len(lost) - 1 and f"run {unended.name}" in resumed.stderr
    assert "orphan" in json.loads((unended / "meta.json").read_text())["tags"]
    study = t.load(home, "cut", to_run=False)[0]
    finished = {tr.user_attrs["run_id"]: tr.params["train.lr"] for tr in study.get_trials()
                if tr.state.name == "COMPLETE"}
    assert set(finished) == set(now) - {unended.name}
    for run_id, lr in finished.items():  # each trial holds its own run's configuration
        assert json.loads((home / "runs" / run_id / "meta.json").read_text())["params"]["train.lr"] == lr
