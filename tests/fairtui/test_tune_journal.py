"""A study's journal read back as input (fairtui.tune.journal): recorded settings checked as the command line checks
them, lines that are not Optuna's operations named, a line cut by a kill repaired before a resume; one driver a
study; the app's study screen on a damaged journal."""

from __future__ import annotations

import pytest

from tests.conftest import fairtui_cmd
from tests.fairtui.test_tune_views import _made_study

pytest.importorskip("optuna")

from fairtui.tune import study as t  # noqa: E402
from fairtui.tune import driver as td  # noqa: E402


def _planted_study(home, profile, **attrs):
    """A study as `fairtui tune` makes it, then lines appended to its journal (as anyone who can edit a committed
    journal could): each attribute set again with another value."""
    from fairtui.tune.space import Objective, parse_dimension

    req = t.Request(home=home, study="s", profile_path=str(profile), space=[parse_dimension("train.lr=0.02:0.1")],
                    trials=2, objective=Objective("avg_worst"))
    study = t.create(req)
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study


@pytest.mark.parametrize("attrs, key", [
    ({"slurm": {"partition": "gpu\nrm -rf ~", "cluster": "slurm"}}, "slurm"),
    ({"slurm": {"partition": "gpu", "mem_gb": "64G", "cluster": "slurm"}}, "slurm"),
    ({"space": [{"key": "method.name", "kind": "choice", "low": None, "high": None, "log": False,
                 "choices": ['pgd_at"\nseed = 99\nx="', "trades"]}]}, "space"),
    ({"space": [{"key": "seed", "kind": "int", "low": 0, "high": 9, "log": False, "choices": []}]}, "space"),
    ({"base": ["train.epochs=1e23"]}, "base"),
    ({"objective": {"name": "worst_at_avg", "floor": float("nan")}}, "objective"),
    ({"trials": -1}, "trials"),
    ({"gpus": "0;reboot"}, "gpus"),
])
def test_a_journal_is_input_a_bad_recorded_value_stops_the_resume(tmp_path, tiny_profile, attrs, key):
    """`tune STUDY --resume` reads the study's settings back from its journal, which may be committed and edited:
    each goes through the command line's checks, and a bad one is one line naming the journal and the key, before
    any trial or run exists."""
    home = tmp_path / "home"
    _planted_study(home, tiny_profile(), **attrs)
    proc = fairtui_cmd("tune", "s", "--resume", home=home)
    assert proc.returncode == 2, proc.stderr
    assert "s.journal" in proc.stderr and f"recorded {key}" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and not (home / "runs").exists()


def test_a_journal_cut_mid_line_is_repaired_before_a_resume_appends(tmp_path, tiny_profile):
    """A full disk or a kill leaves the journal's last operation without its newline. Optuna skips it when it
    reads; a resume cuts it off before appending, so the study stays readable."""
    home = tmp_path / "home"
    _planted_study(home, tiny_profile())
    journal = home / "studies" / "s.journal"
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "worker_id": "w", "study_id": 0, "user_attr": {"x"')
    study, req = t.load(home, "s")  # as a resume loads it
    assert journal.read_bytes() == whole
    study.set_user_attr("after", 1)  # the resume's first write starts a line of its own
    assert t.load(home, "s", to_run=False)[0].user_attrs["after"] == 1


async def test_the_study_screen_on_a_damaged_journal_says_so_and_the_app_lives(tmp_path, tiny_profile):
    """`y` on a trial of a study whose journal holds a bad line: the screen says what is wrong, the app goes on."""
    from fairtui.app import make_app
    from fairtui.app.screens.study import StudyScreen
    from fairtui.runs.synthetic import make_run
    from tests.fairtui.test_app import wait_until

    home = tmp_path / "home"
    ids = [f"20260101-00000{i}-trial{i}" for i in range(4)]
    for i, run_id in enumerate(ids):
        make_run(home, run_id, name=f"fig-t{i}", tags=("study:fig", f"trial:{i}"))
    _made_study(home, tiny_profile, ids)
    with open(home / "studies" / "fig.journal", "ab") as fh:
        fh.write(b'{"op_code": 99, "worker_id": "x"}\n')
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.app.push_screen(StudyScreen("fig"))
        await wait_until(pilot, lambda: "is not an Optuna journal operation" in
                         str(app.screen.query_one("#study-title").render()))
        assert app.is_running


def test_a_second_driver_of_one_study_is_refused_naming_the_first(tmp_path, tiny_profile):
    """`tune S --resume` while `tune S` drives S: the second driver is refused in one line naming the first (its
    pid and host); once the first has ended (its lock released, also by a kill), a resume drives the study."""
    import os

    home = tmp_path / "home"
    _planted_study(home, tiny_profile())
    study, req = t.load(home, "s")
    first = td.Driver(study, req)._driver_lock()
    try:
        with pytest.raises(t.TuneError, match=rf"another `fairtui tune` drives this study \(pid {os.getpid()} on "):
            td.Driver(study, req)._driver_lock()
    finally:
        first.close()
    td.Driver(study, req)._driver_lock().close()


def _create_at_once(home, profile, name, unique, barrier, out):
    from fairtui.tune.space import Objective, parse_dimension

    req = t.Request(home=home, study=name, profile_path=str(profile), space=[parse_dimension("train.lr=0.02:0.1")],
                    trials=2, objective=Objective("avg_worst"))
    barrier.wait()
    try:
        t.create(req, unique=unique)
        out.put(("made", req.study))
    except Exception as err:  # noqa: BLE001 (what a racing command met, reported to the test)
        out.put((type(err).__name__, str(err)))


@pytest.mark.parametrize("unique", [True, False])
def test_two_studies_made_at_the_same_instant_never_meet_in_one_journal(tmp_path, tiny_profile, unique):
    """Two `fairtui tune` in the same second made one default name (PROFILE-YYYYmmdd-HHMMSS) and met in one journal:
    an Optuna traceback. The journal is now made exclusively: a name the command chose becomes NAME-2; a name the
    user gave is refused in one line for the second command."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_create_at_once, args=(tmp_path / "home", tiny_profile(), "same", unique, barrier, out))
             for _ in range(4)]
    for p in procs:
        p.start()
    got = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    if unique:
        assert got == [("made", "same"), ("made", "same-2"), ("made", "same-3"), ("made", "same-4")], got
        assert sorted(t.studies(tmp_path / "home")) == ["same", "same-2", "same-3", "same-4"]
    else:
        assert [g for g in got if g[0] == "made"] == [("made", "same")], got
        assert all(kind == "TuneError" for kind, _ in got if kind != "made"), got
    for name in t.studies(tmp_path / "home"):
        assert len(t.load(tmp_path / "home", name, to_run=False)[0].get_trials()) == 0


def _hold_the_journal_lock(path, ready):
    lock = t.FlockLock(path)
    lock.acquire()
    ready.set()
    import time

    time.sleep(600)  # killed while holding it, as a driver killed mid-write


def test_a_writer_killed_while_holding_the_journal_lock_holds_up_no_one(tmp_path, tiny_profile):
    """Optuna's default lock is a symlink that a killed writer leaves behind: every later write of the study
    waited its 30 s grace period (a driver took a minute to answer Ctrl-C). The journal's lock is a flock the kernel
    releases with its holder: right after the kill it is free, and a stale symlink of the old lock changes nothing."""
    import multiprocessing
    import os
    import signal

    home = tmp_path / "home"
    study = _planted_study(home, tiny_profile())
    journal = home / "studies" / "s.journal"
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_the_journal_lock, args=(journal, ready))
    holder.start()
    assert ready.wait(60)
    import fcntl

    probe = open(str(journal) + ".flock", "a")
    with pytest.raises(BlockingIOError):
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held while the holder lives
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(60)
    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free at once: the kernel released it
    fcntl.flock(probe, fcntl.LOCK_UN)
    probe.close()
    os.symlink(journal, str(journal) + ".lock")  # what a killed writer of Optuna's own lock leaves
    storage = t.storage(home, "s")
    assert isinstance(storage._backend._lock, t.FlockLock)
    study = t.optuna().load_study(study_name="s", storage=storage)
    study.set_user_attr("after", 1)  # would wait out the stale symlink's 30 s with Optuna's lock
    assert t.optuna().load_study(study_name="s", storage=t.storage(home, "s")).user_attrs["after"] == 1


def _write_a_line_slowly(path, line, ready):
    import time

    lock = t.FlockLock(path)
    lock.acquire()
    with open(path, "ab") as fh:
        fh.write(line[:10])  # a writer's line in flight: no newline yet
        fh.flush()
        ready.set()
        time.sleep(1.0)
        fh.write(line[10:])
    lock.release()


def test_the_repair_of_a_cut_line_never_cuts_a_writers_line_in_flight(tmp_path, tiny_profile):
    """A resume cuts a journal's last line when it has no newline (a kill mid-write). A line another writer is
    still writing looks the same: the repair reads again under the writers' lock, and the line is kept whole."""
    import multiprocessing

    home = tmp_path / "home"
    _planted_study(home, tiny_profile())
    journal = home / "studies" / "s.journal"
    line = journal.read_bytes().splitlines(keepends=True)[-1]
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    writer = ctx.Process(target=_write_a_line_slowly, args=(journal, line, ready))
    writer.start()
    assert ready.wait(60)
    from fairtui.tune.journal import check_journal

    check_journal(journal, repair=True)
    writer.join(60)
    assert journal.read_bytes().endswith(line) and journal.read_bytes().count(b"\n") >= 2
    check_journal(journal)  # every line whole


@pytest.mark.parametrize("line, said", [
    (b"garbage{\n", ["is not"]), (b'{"op_code": 99, "worker_id": "x"}\n', ["is not"]), (b"[1, 2]\n", ["is not"]),
    # #88 item 5: op_code 5 without trial_id crashed `tune show` and `tune --resume` with a 97-line KeyError from
    # inside Optuna; the journal's lines are checked field by field before Optuna reads them
    (b'{"op_code": 5, "worker_id": "x", "param_name": "lr"}\n', ["(op_code", "lacks"]),
    (b'{"op_code": 6, "worker_id": "x", "trial_id": "0", "state": 1}\n', ["(op_code", "lacks"]),
    (b'{"op_code": 7, "worker_id": "x", "trial_id": 0, "step": true, "intermediate_value": 0.5}\n',
     ["(op_code", "lacks"]),
])
def test_a_garbage_unknown_or_malformed_journal_line_is_one_line_naming_it(tmp_path, tiny_profile, line, said):
    home = tmp_path / "home"
    _planted_study(home, tiny_profile())
    journal = home / "studies" / "s.journal"
    n = journal.read_bytes().count(b"\n") + 1
    with open(journal, "ab") as fh:
        fh.write(line)
    for args in (("tune", "show", "s"), ("tune", "s", "--resume")):
        proc = fairtui_cmd(*args, home=home)
        assert proc.returncode == 2, proc.stderr
        assert f"line {n} {said[0]}" in proc.stderr and all(w in proc.stderr for w in said[1:])
        assert "Traceback" not in proc.stderr
