"""`fairtui tune`: a study on Optuna whose trials are ordinary runs through the queue, measured on validation
only (the test split once, for the best trial), with bad input refused before anything exists, a pruned trial
marked as pruned, and a driver killed with SIGKILL resumed with no trial lost or run twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import HANG_S, ROOT, engine_env, fairtui_cmd

optuna = pytest.importorskip("optuna")

from fairtui.tune import study as t  # noqa: E402
from fairtui.tune import driver as td  # noqa: E402
from fairtui.tune import space as ts  # noqa: E402


def untouched(home) -> bool:
    return not (home / "runs").exists() or not any((home / "runs").iterdir())


# -- the space, the objective ----------------------------------------------------------------------------

def test_space_items_parse_to_ranges_and_choices():
    assert ts.parse_dimension("train.lr=0.01:0.1:log") == ts.Dimension("train.lr", "float", 0.01, 0.1, True)
    assert ts.parse_dimension("attack.steps=3:10") == ts.Dimension("attack.steps", "int", 3, 10)
    assert ts.parse_dimension("method.beta=1:6.5").kind == "float"
    assert ts.parse_dimension("method.variant=reweight,reweight_remargin").choices == ("reweight", "reweight_remargin")
    assert ts.parse_dimension("attack.steps=3,5,10").choices == (3, 5, 10)


@pytest.mark.parametrize("item, words", [
    ("train.lr=0.1:0.01", "empty or inverted range"), ("train.lr=0.1:0.1", "empty or inverted range"),
    ("train.lr=0:1:log", "log range needs LOW > 0"), ("train.lr=a:b", "not a range of numbers"),
    ("seed=0:10", "not tunable"), ("data.dataset=digits,mnist", "not tunable"), ("eval.eps=0.1:0.2", "not tunable"),
    ("method.variant=reweight", "at least two values"), ("train.lr", "expected KEY=SPEC"),
    ("train.lr=0.1:1:exp", "LOW:HIGH:log")])
def test_a_bad_space_item_is_one_line_naming_the_option(item, words):
    with pytest.raises(t.TuneError, match=words) as err:
        ts.parse_dimension(item)
    assert str(err.value).startswith("--space:")


def test_objectives_read_an_epochs_validation_numbers(tmp_path):
    epoch = {"val": {"avg_robust": 0.4, "worst_robust": 0.1}}
    assert ts.Objective("worst").value(epoch) == 0.1
    assert ts.Objective("avg_worst").value(epoch) == pytest.approx(0.5)
    assert ts.Objective("worst_at_avg", 0.35).value(epoch) == 0.1
    assert ts.Objective("worst_at_avg", 0.45).value(epoch) == pytest.approx(-0.05)  # below every feasible one
    assert ts.parse_objective("worst_at_avg:0.3", tmp_path).floor == 0.3
    for bad in ("best", "worst:1", "worst_at_avg", "worst_at_avg:1.5", "worst_at_avg:norun-2"):
        with pytest.raises(t.TuneError, match="--objective"):
            ts.parse_objective(bad, tmp_path)


# -- the command --------------------------------------------------------------------------------------------

STUDY = ("--set", "train.epochs=2", "--space", "train.lr=0.02:0.1:log", "--space", "attack.steps=2,3")


@pytest.mark.parametrize("args, words", [
    (("--space", "train.lr=0.1:0.01", "--trials", "2"), "--space: train.lr: an empty or inverted range"),
    (("--space", "seed=0:9", "--trials", "2"), "seed is not tunable"),
    (("--space", "method.lambda9=0.1:0.3", "--trials", "2"), "method.lambda9"),
    (("--space", "train.lr=0.01:0.1", "--trials", "2", "--objective", "fairness"), "--objective"),
    (("--space", "train.lr=0.01:0.1", "--trials", "0"), "--trials"),
    (("--trials", "2"), "--space"),
    (("--space", "train.lr=0.01:0.1", "--trials", "2", "--pruner", "sometimes"), "--pruner"),
    (("--space", "train.lr=0.01:0.1", "--trials", "2", "--study", "a/b"), "--study")])
def test_bad_input_is_refused_before_anything_exists(tmp_path, tiny_profile, args, words):
    home = tmp_path / "home"
    proc = fairtui_cmd("tune", str(tiny_profile()), *args, home=home)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert untouched(home) and not (home / "studies").exists()


def test_a_study_runs_its_trials_through_the_queue_and_touches_the_test_split_once(tmp_path, tiny_profile):
    home = tmp_path / "home"
    proc = fairtui_cmd("tune", str(tiny_profile()), *STUDY, "--trials", "3", "--parallel", "2", "--study", "s1",
                       "--objective", "avg_worst", "--pruner", "none", "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["state"] for r in doc["trials"]] == ["complete"] * 3 and doc["budget"] == 3
    runs = {r["run_id"]: r for r in doc["trials"]}
    assert len(runs) == 3
    best = doc["finished"]["run_id"]
    assert best == doc["best"]["run_id"]
    for run_id, row in runs.items():
        meta = json.loads((home / "runs" / run_id / "meta.json").read_text())
        assert meta["tags"] == ["study:s1", f"trial:{row['trial']}"] and meta["params"] == row["params"]
        tests = [json.loads(line) for line in (home / "runs" / run_id / "events.jsonl").read_text().splitlines()
                 if '"eval_result"' in line and '"split":"test"' in line.replace(" ", "")]
        assert bool(tests) == (run_id == best), run_id  # the test split: the best trial's run alone
    # the same study again is refused; `show` reads it back
    again = fairtui_cmd("tune", str(tiny_profile()), *STUDY, "--trials", "3", "--study", "s1", home=home)
    assert again.returncode == 2 and "--resume" in again.stderr
    other = tmp_path / "other.toml"
    other.write_text(tiny_profile().read_text())
    clash = fairtui_cmd("tune", str(other), *STUDY, "--trials", "3", "--study", "s1", home=home)
    assert clash.returncode == 2 and "a study of" in clash.stderr
    shown = fairtui_cmd("tune", "show", "s1", home=home)
    assert shown.returncode == 0 and "<- best" in shown.stdout and "3 of 3 trials" in shown.stdout
    # a user can follow it (#56 item 7): each trial's epochs as they come, parameters rounded, the objective in %
    # as the app shows it; `tune show` lists the studies, and a unique prefix names one
    # two trials run at once, so their lines interleave in either order: each trial's own epochs come in order
    progress = [line for line in proc.stderr.splitlines() if ": epoch " in line]
    assert len(progress) == 6, progress
    for trial in range(3):
        own = [line for line in progress if line.startswith(f"trial {trial}: ")]
        assert [line.split(": epoch ")[1].split(",")[0] for line in own] == ["1/2", "2/2"], progress
        assert all(", objective " in line and line.endswith("%") for line in own), own
    made = next(line for line in proc.stderr.splitlines() if line.startswith("trial 0: run "))
    lr = made.split("train.lr: ")[1].split(",")[0].rstrip("}")
    assert len(lr.replace("0.", "").lstrip("0")) <= 4, made  # four significant digits
    best_value = f"{100 * doc['best']['value']:.1f}%"
    assert best_value in shown.stdout and "objective" in shown.stdout.splitlines()[1]
    listed = fairtui_cmd("tune", "show", "--json", home=home)
    assert json.loads(listed.stdout) == {"studies": ["s1"]}
    by_prefix = fairtui_cmd("tune", "show", "s", home=home)
    assert by_prefix.returncode == 0 and by_prefix.stdout == shown.stdout
    missing = fairtui_cmd("tune", "show", "q", home=home)
    assert missing.returncode == 2 and "the home's: s1" in missing.stderr


@pytest.mark.parametrize("train, first", [
    (dict(epochs=30, schedule="piecewise", milestones=(20, 26)), 21),  # digits: the first epoch at lr x0.1
    (dict(epochs=30, schedule="piecewise", milestones=(30,)), 30),
    (dict(epochs=30, schedule="cosine", milestones=()), 15),
    (dict(epochs=3, schedule="constant", milestones=()), 1),
    (dict(epochs=1, schedule="piecewise", milestones=()), 1),
])
def test_the_median_pruner_waits_for_the_schedules_first_decay(train, first):
    from types import SimpleNamespace

    assert t.prune_after(SimpleNamespace(**train)) == first


def test_the_median_pruner_prunes_nothing_before_its_epoch_nor_before_its_finished_trials():
    """The pruner a study is given: a trial below every finished one is kept until epoch ``after`` and
    pruned there, and none is pruned while fewer than ``startup`` trials have finished."""
    def study(finished):
        s = optuna.create_study(direction="maximize", pruner=t.sampler_and_pruner(0, "median", 3, 2)[1])
        for _ in range(finished):
            good = s.ask()
            for epoch in (1, 2, 3, 4):
                good.report(0.5, epoch)
            s.tell(good, 0.5)
        return s

    s = study(2)
    weak = s.ask()
    verdicts = []
    for epoch in (1, 2, 3):
        weak.report(0.1, epoch)
        verdicts.append(weak.should_prune())
    assert verdicts == [False, False, True]
    s = study(1)  # one finished trial: not enough to compare with
    weak = s.ask()
    weak.report(0.1, 3)
    assert not weak.should_prune()


def test_a_study_records_its_pruners_epoch_and_one_made_before_keeps_the_old_rule(tmp_path, tiny_profile):
    from fairtui.cli.tune import _new_study, render
    from tests.conftest import TINY

    home = tmp_path / "home"
    profile = tiny_profile(base=TINY.replace("epochs = 2", "epochs = 8\nmilestones = [4]"))
    _new_study(str(profile), ["train.lr=0.01:0.1"], 4, "avg_worst", 1, "p1", "median", 0, [], None, home,
               lambda line: None)
    st, req = t.load(home, "p1")
    assert (req.prune_after, req.prune_startup) == (5, 5)  # lr x0.1 from epoch 5
    assert "pruner median from epoch 5, after 5 finished trials" in render(t.summary(st, req))
    # a study made before the pruner's numbers were recorded: its attributes lack them
    old = optuna.create_study(study_name="p0", storage=t.storage(home, "p0"), direction="maximize")
    for key, value in st.user_attrs.items():
        if key not in ("prune_after", "prune_startup"):
            old.set_user_attr(key, value)
    _, req = t.load(home, "p0")
    assert (req.prune_after, req.prune_startup) == (1, 2)


def test_a_pruned_trial_is_marked_pruned_not_failed(tmp_path, tiny_profile):
    """A pruner that prunes at the first report (Optuna's ThresholdPruner): the trial is PRUNED in the study, its
    run stopped and tagged `pruned`, and the study goes on to its budget."""
    home = tmp_path / "home"
    req = t.Request(home=home, study="p1", profile_path=str(tiny_profile()), space=[ts.parse_dimension(
        "train.lr=0.02:0.1")], base=["train.epochs=30"], trials=2, objective=ts.Objective("avg_worst"),
        interval=0.2)
    study = t.create(req)
    study.pruner = optuna.pruners.ThresholdPruner(upper=-1.0)  # every value is above: prune at once
    td.Driver(study, req).run()
    trials = study.get_trials()
    assert [tr.state for tr in trials] == [optuna.trial.TrialState.PRUNED] * 2
    for tr in trials:
        run_dir = home / "runs" / tr.user_attrs["run_id"]
        meta = json.loads((run_dir / "meta.json").read_text())
        assert "pruned" in meta["tags"] and meta["pruned"] is True
        deadline = time.time() + HANG_S
        from fairtui.runs.runfolder import RunView

        while RunView.load(run_dir).status() == "running" and time.time() < deadline:
            time.sleep(0.2)
        assert RunView.load(run_dir).status() == "stopped"
        assert len([e for e in RunView.load(run_dir).epochs]) < 30


def test_a_driver_killed_mid_study_resumes_with_no_trial_lost_or_run_twice(tmp_path, tiny_profile):
    home = tmp_path / "home"
    cmd = [sys.executable, "-m", "fairtui.cli", "tune", str(tiny_profile()), *STUDY, "--set", "train.epochs=4",
           "--trials", "3", "--study", "k1", "--pruner", "none", "--home", str(home)]
    driver = subprocess.Popen(cmd, cwd=ROOT, env=engine_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    deadline = time.time() + HANG_S
    while time.time() < deadline and not (home / "runs").exists():
        time.sleep(0.05)
    while time.time() < deadline and not any((home / "runs").iterdir()):
        time.sleep(0.05)
    os.kill(driver.pid, signal.SIGKILL)  # the driver alone: its trial's engine trains on, detached
    driver.wait(timeout=HANG_S)
    proc = fairtui_cmd("tune", "k1", "--resume", "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # killed after its first trial's run was made: three complete trials; killed while it was being made (the
    # staging folder): that trial failed without a run, and its configuration was tried again
    complete = [r for r in doc["trials"] if r["state"] == "complete"]
    assert len(complete) == 3 and all(r["run_id"] is None for r in doc["trials"] if r["state"] != "complete"), \
        (doc["trials"], proc.stderr)
    run_ids = [r["run_id"] for r in complete]
    assert len(set(run_ids)) == 3 and sorted(p.name for p in (home / "runs").iterdir() if p.is_dir()
                                             and not p.name.startswith(".")) == sorted(run_ids)


def test_a_failing_trial_counts_as_failed_and_the_study_goes_on(tmp_path, tiny_profile):
    """Trial 0 diverges (lr 1e9: its run fails, "the training loss became nan"): FAIL in Optuna, and the study
    still makes its second trial, which completes and is the best."""
    home = tmp_path / "home"
    req = t.Request(home=home, study="f1", profile_path=str(tiny_profile()),
                    space=[ts.parse_dimension("train.lr=0.01:1e9:log")], base=["train.epochs=1"], trials=2,
                    objective=ts.Objective("avg_worst"), pruner="none", interval=0.2)
    study = t.create(req)
    study.enqueue_trial({"train.lr": 1e9})
    study.enqueue_trial({"train.lr": 0.05})
    td.Driver(study, req).run()
    from fairtui.runs.runfolder import RunView

    trials = study.get_trials()
    assert [tr.state for tr in trials] == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.COMPLETE]
    failed = RunView.load(home / "runs" / trials[0].user_attrs["run_id"])
    assert failed.status() == "failed" and "nan" in failed.finished.get("error", ""), failed.finished
    assert study.best_trial.number == 1


def _refuse_writes(monkeypatch, code: int, when=lambda logs: True):
    """Optuna's journal cannot be written (ENOSPC: a full disk; EROFS: a read-only one) while ``when(logs)``."""
    import errno

    from optuna.storages.journal import JournalFileBackend

    real = JournalFileBackend.append_logs

    def append_logs(self, logs):
        if when(logs):
            raise OSError(code, os.strerror(code), self._file_path)
        return real(self, logs)

    monkeypatch.setattr(JournalFileBackend, "append_logs", append_logs)
    return errno


def test_a_full_disk_mid_study_stops_the_driver_in_one_line_and_resume_loses_nothing(tmp_path, tiny_profile,
                                                                                     monkeypatch):
    """The journal fills up at the first epoch's report: the driver ends with a StorageError naming the file,
    the disk and --resume; the trial's run trains on; once the disk has room, --resume adopts that run and the
    study ends with its budget, no trial lost or run twice."""
    import errno

    home = tmp_path / "home"
    req = t.Request(home=home, study="d1", profile_path=str(tiny_profile()),
                    space=[ts.parse_dimension("train.lr=0.02:0.1")], base=["train.epochs=2"], trials=2,
                    objective=ts.Objective("avg_worst"), pruner="none", interval=0.2)
    study = t.create(req)
    report = 7  # JournalOperation.SET_TRIAL_INTERMEDIATE_VALUE: a trial's epoch reported
    with monkeypatch.context() as patch:
        _refuse_writes(patch, errno.ENOSPC, lambda logs: any(log.get("op_code") == report for log in logs))
        with pytest.raises(t.StorageError) as raised:
            td.Driver(study, req).run()
    message = str(raised.value)
    assert "\n" not in message and "No space left on device" in message and "d1.journal" in message
    assert "fairtui tune d1 --resume" in message
    first = study.get_trials()
    assert [tr.state for tr in first] == [optuna.trial.TrialState.RUNNING]  # recorded as it was: still running
    study, req = t.load(home, "d1")
    td.Driver(study, req).run()
    trials = study.get_trials()
    assert [tr.state for tr in trials] == [optuna.trial.TrialState.COMPLETE] * 2
    run_ids = [tr.user_attrs["run_id"] for tr in trials]
    assert run_ids[0] == first[0].user_attrs["run_id"] and len(set(run_ids)) == 2
    assert sorted(p.name for p in (home / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")) \
        == sorted(run_ids)


def test_a_read_only_disk_refuses_a_new_study_and_leaves_nothing(tmp_path, tiny_profile, monkeypatch):
    import errno

    home = tmp_path / "home"
    _refuse_writes(monkeypatch, errno.EROFS)
    req = t.Request(home=home, study="r1", profile_path=str(tiny_profile()),
                    space=[ts.parse_dimension("train.lr=0.02:0.1")], trials=2, objective=ts.Objective("worst"))
    with pytest.raises(t.StorageError, match="Read-only file system; nothing was made"):
        t.create(req)
    assert not t.study_path(home, "r1").exists() and untouched(home)


def test_trials_run_as_slurm_jobs(tmp_path, tiny_profile):
    """`--launcher slurm`: each trial is a job of its own (submitit's local executor stands for the cluster), the
    study reads their runs as it reads the queue's, and --resume keeps the launcher."""
    pytest.importorskip("submitit")
    home = tmp_path / "home"
    # files, not pipes: submitit's local controller inherits them and outlives the command
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        code = subprocess.run([sys.executable, "-m", "fairtui.cli", "tune", str(tiny_profile()), *STUDY,
                               "--trials", "2", "--parallel", "2", "--study", "j1", "--pruner", "none",
                               "--launcher", "slurm", "--cluster", "local", "--json", "--home", str(home)],
                              cwd=ROOT, env={**engine_env(), "OMP_NUM_THREADS": "1"}, stdout=out, stderr=err,
                              timeout=HANG_S).returncode
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert code == 0, stderr
    assert "as Slurm jobs (local)" in stderr
    doc = json.loads(stdout)
    assert [r["state"] for r in doc["trials"]] == ["complete"] * 2 and doc["finished"]
    for row in doc["trials"]:
        meta = json.loads((home / "runs" / row["run_id"] / "meta.json").read_text())
        assert meta["launcher"] == "slurm" and meta["slurm_cluster"] == "local" and meta["slurm_job_id"]
    study, req = t.load(home, "j1")
    assert req.slurm_settings().cluster == "local"


@pytest.mark.parametrize("args, words", [
    (("--launcher", "slurm", "--cluster", "local", "--gpus", "0"), "--gpus picks this machine's GPUs"),
    (("--partition", "gpu"), "--partition: only with --launcher slurm"),
    (("--launcher", "slurm", "--partition", "gpu\ntouch x"), "control character")])
def test_slurm_options_of_a_study_are_checked_before_anything_exists(tmp_path, tiny_profile, args, words):
    home = tmp_path / "home"
    proc = fairtui_cmd("tune", str(tiny_profile()), *STUDY, "--trials", "2", *args, home=home)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert untouched(home) and not (home / "studies").exists()


def test_a_resumed_study_never_draws_its_first_trials_again(tmp_path, tiny_profile):
    """The sampler of a resumed study is seeded by (seed, trials made): reseeded with the study's own seed, its
    random start-up stream began again and the first trial after a resume repeated trial 0's parameters."""
    from fairtui.cli.tune import _new_study

    home = tmp_path / "home"
    _new_study(str(tiny_profile()), ["train.lr=0.01:0.1:log", "attack.eps=0.1:0.3"], 16, "avg_worst", 1, "r", "median",
               0, [], None, home, lambda line: None)
    first, req = t.load(home, "r")  # a new study: its own seed, as before
    draw = lambda study: {d.key: d.suggest(study.ask()) for d in req.space}  # noqa: E731 (as the driver does)
    drawn = [draw(first) for _ in range(3)]
    again, _ = t.load(home, "r")  # resumed with three trials made (still in TPE's random start-up)
    resumed = draw(again)
    assert all(resumed != d for d in drawn)
    assert t.resumed_seed(0, 0) == 0 and t.resumed_seed(0, 3) == t.resumed_seed(0, 3) != t.resumed_seed(0, 4)


@pytest.mark.parametrize("args, says", [
    (["--space", "train.epochs=1:100000000000000000000000"], "must be at most 100000"),
    (["--space", 'method.name=pgd_at,trades"\nseed = 99\nx="'], "without quotes or control characters"),
    (["--space", "train.lr=0.01:0.1", "--objective", "worst_at_avg:somerun-nan"], "a number from 0 to 100"),
    (["--space", "train.lr=0.01:0.1", "--objective", "worst_at_avg:somerun-inf"], "a number from 0 to 100"),
    (["--space", "train.lr=0.01:0.1", "--seed", "4294967296"], "4294967296"),
])
def test_hostile_tuning_input_is_refused_before_anything_exists(tmp_path, args, says):
    from tests.conftest import fairtui_cmd

    home = tmp_path / "home"
    out = fairtui_cmd("tune", str(ROOT / "profiles" / "quickstart.toml"), "--trials", "1", *args, home=home)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
    assert not (home / "studies").exists() and not (home / "runs").exists()


def test_a_string_choice_is_written_as_one_toml_string():
    import tomllib

    from fairtui.tune.space import override

    assert tomllib.loads(override("method.form", 'co"de\\')) == {"method": {"form": 'co"de\\'}}
