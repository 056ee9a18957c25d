"""End to end on digits: events follow the schema, checkpoints load, a killed run resumes exactly."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import HANG_S, ROOT, engine_env, events_of, make_run_dir, run_engine, train_tiny

BASE_KEYS = {"v", "seq", "t", "run_id", "type"}


def check_schema(events: list[dict], k: int = 10) -> None:
    assert [e["seq"] for e in events] == list(range(len(events)))
    for e in events:
        assert BASE_KEYS <= set(e), e
    started = events[0]
    assert started["type"] == "run_started"
    assert {"config", "num_classes", "class_names", "device", "runtime", "seed"} <= set(started)
    # the CPU with the threads it trained with: 0 (PyTorch's default) is said as the count it resolved to
    assert started["device"].startswith("cpu (") and " of " in started["device"].split(";")[0]
    assert started["device"].endswith("" if started["runtime"] == "fp32" else f"; {started['runtime']}")
    for e in (e for e in events if e["type"] == "epoch_end"):
        assert {"epoch", "lr", "time_s", "train", "val", "method_state"} <= set(e)
        assert {"loss", "clean_acc", "robust_acc", "clean_acc_per_class", "robust_acc_per_class"} <= set(e["train"])
        for key in ("clean_acc_per_class", "robust_acc_per_class"):
            assert len(e["val"][key]) == k
            assert all(0 <= a <= 1 for a in e["val"][key])
    for e in (e for e in events if e["type"] == "eval_result"):
        assert {"split", "checkpoint", "attack", "clean_acc_per_class", "robust_acc_per_class", "avg_clean",
                "avg_robust", "worst_robust", "cv", "mcd"} <= set(e)
    assert events[-1]["type"] == "run_finished"


def test_natural_training_runs_end_to_end(tmp_path, tiny_profile):
    """PGD-AT, TRADES and every fairness method train end to end in the kill -9 test below (its uninterrupted
    run is checked against the schema there); natural training, which has no attack to resume, is checked here."""
    method = "natural"
    run_dir = make_run_dir(tmp_path, tiny_profile(), overrides=(f"method.name={method}",))
    proc = run_engine(run_dir)
    assert proc.returncode == 0, proc.stderr
    events = events_of(run_dir)
    check_schema(events)
    assert events[-1]["status"] == "completed"
    assert [e["epoch"] for e in events if e["type"] == "epoch_end"] == [1, 2]
    evals = [(e["checkpoint"], e["attack"]) for e in events if e["type"] == "eval_result"]
    assert evals == [("last", "pgd5"), ("best", "pgd5")]
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["epoch"] == 2 and state["profile"]["method"]["name"] == method
    assert torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)["model"]
    assert (run_dir / "engine.json").exists()


def wait_for(predicate, timeout: float = 120.0, step: float = 0.02) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(step)
    raise TimeoutError


def epoch_ends(run_dir) -> list[int]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("type") == "epoch_end":
            out.append(e["epoch"])
    return out


METHOD_CASES = {
    "pgd_at": ((), set()),
    "trades": ((), set()),
    "frl": (("method.pretrain_epochs=1", "method.finetune_lr=0.01"),
            {"clean_err_per_class", "bndy_err_per_class", "lambda_nat", "lambda_bndy", "lambda_margin",
             "weight_nat", "weight_bndy", "eps_per_class"}),
    "cfa": (('method.base="trades"', "method.fawa_start_epoch=1", "method.fawa_threshold=0.0"),
            {"train_robust_acc_per_class", "eps_per_class", "beta_per_class", "fawa_accepted",
             "val_worst_robust"}),
    "wat": ((), {"weights", "val_cost", "val_cost_sum"}),
    # the CFA authors' code: training attacks in BatchNorm train mode, clean accuracy after the step
    "cfa+code": (('method.form="code"', 'method.base="at"', "method.calibration_start_epoch=2"),
                 {"train_robust_acc_per_class", "eps_per_class"}),
    # DAFA killed inside the warm-up's last epoch (epoch 2: P is gathered in it), then trained with W
    "dafa": (("method.warmup_epochs=2", "method.weight_floor=0.05"),
             {"dafa_weight", "eps_per_class", "step_per_class", "weight_nat"}),
    # FAAL fine-tuning after an in-run pre-training epoch (its p* summary is a measurement of each epoch)
    "faal": (("method.pretrain_epochs=1",),
             {"faal_weight_mean", "faal_weight_min", "faal_weight_max", "class_score_mean"}),
    # BAT: two early-stopped attacks a batch (their random starts and stops continue exactly); no class-wise state
    "bat": ((), set()),
    # compiled (inductor on the CPU): per-sample margins through the compiled model, exact resume
    "cfa+compile": (("method.calibration_start_epoch=2", 'train.compile="on"'),
                    {"train_robust_acc_per_class", "eps_per_class"}),
}


@pytest.mark.parametrize("method", list(METHOD_CASES))
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path, tiny_profile, method):
    profile = tiny_profile()
    extra, state_keys = METHOD_CASES[method]
    overrides = ("train.epochs=3", f"method.name={method.split('+')[0]}", "data.train_per_class=60",
                 "train.ema_decay=0.5",
                 *extra)
    straight = make_run_dir(tmp_path, profile, "straight", overrides)
    done = run_engine(straight)
    assert done.returncode == 0, done.stderr
    a = events_of(straight)
    check_schema(a)  # the method trains end to end: every event as the schema says, three epochs, completed
    assert a[-1]["status"] == "completed" and [e["epoch"] for e in a if e["type"] == "epoch_end"] == [1, 2, 3]
    assert {("last", "pgd5"), ("best", "pgd5")} <= {(e["checkpoint"], e["attack"]) for e in a
                                                    if e["type"] == "eval_result"}
    assert (straight / "engine.json").exists()

    killed = make_run_dir(tmp_path, profile, "killed", overrides)
    proc = subprocess.Popen([sys.executable, "-m", "engine", "train", str(killed)], env=engine_env(), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: 1 in epoch_ends(killed))
    # kill at once: somewhere in epoch 2 (a sleep here could let a fast machine finish the run)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert "run_finished" not in (killed / "events.jsonl").read_text()
    resumed = run_engine(killed)
    assert resumed.returncode == 0, resumed.stderr

    b = events_of(killed)
    check_schema(b)
    last_state = [e for e in b if e["type"] == "epoch_end"][-1]["method_state"]
    assert state_keys <= set(last_state), state_keys - set(last_state)
    states = lambda evs: [e["method_state"] for e in evs if e["type"] == "epoch_end"]  # noqa: E731
    assert states(a) == states(b)  # the method's class-wise state continues exactly
    back = next(e for e in b if e["type"] == "run_resumed")  # what trained after the resume: recorded there too
    assert back["data_fingerprint"] == b[0]["data_fingerprint"]
    same = ("code", "cpu", "torch")
    assert {k: back["provenance"][k] for k in same} == {k: b[0]["provenance"][k] for k in same}
    assert back["provenance"]["pid"] != b[0]["provenance"]["pid"]  # the resume's own process
    finals = lambda evs: [(e["checkpoint"], e["robust_acc_per_class"], e["clean_acc_per_class"])  # noqa: E731
                          for e in evs if e["type"] == "eval_result"]
    assert finals(a) == finals(b)
    ends = lambda evs: {e["epoch"]: e["val"] for e in evs if e["type"] == "epoch_end"}  # noqa: E731
    assert ends(a) == ends(b)
    sa = torch.load(straight / "checkpoints" / "last.pt", weights_only=True)
    sb = torch.load(killed / "checkpoints" / "last.pt", weights_only=True)
    for key in sa["model"]:
        assert torch.equal(sa["model"][key], sb["model"][key]), key
        assert torch.equal(sa["ema"][key], sb["ema"][key]), key
    for name, weights in sa["averaged"].items():  # FAWA
        for key in weights:
            assert torch.equal(weights[key], sb["averaged"][name][key]), (name, key)
    # the names a reader lists without torch are the ones the checkpoint has
    from engine.runtime.checkpoint import CheckpointStore
    from fairtui.runs.runfolder import RunView

    assert RunView.load(killed).checkpoint_names() == CheckpointStore(killed / "checkpoints").available()
    assert "ema" in RunView.load(killed).checkpoint_names()


def test_sigint_stops_cleanly_and_keeps_the_checkpoint(tmp_path, tiny_profile):
    run_dir = make_run_dir(tmp_path, tiny_profile(), overrides=("train.epochs=50", "data.train_per_class=60"))
    proc = subprocess.Popen([sys.executable, "-m", "engine", "train", str(run_dir)], env=engine_env(), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(lambda: 1 in epoch_ends(run_dir))
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=HANG_S) == 130
    last = events_of(run_dir)[-1]
    assert last["type"] == "run_finished" and last["status"] == "stopped"
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["epoch"] >= 1
    assert not list((run_dir / "checkpoints").glob(".*"))  # no temp files left behind


def test_a_repeated_sigterm_is_one_stop_request_and_a_second_ctrl_c_leaves_now():
    """Slurm's scancel reaches a rank directly and again through its launcher: the second SIGTERM must
    not turn the stop at the next batch (the same batch on every rank) into leaving at once."""
    from engine.training.process import StopFlag

    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        flag = StopFlag()
        flag.install()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])


def test_divergence_fails_the_run_and_keeps_the_last_good_checkpoint(tmp_path, tiny_profile, monkeypatch):
    from engine.training import trainer as trainer_mod
    from engine.contract.profile_io import load_profile
    from engine.contract.events import EventWriter
    from engine.runtime.progress import Progress
    from engine.training.process import guarded
    from engine.runtime.device import make_runtime

    run_dir = make_run_dir(tmp_path, tiny_profile(), overrides=("train.epochs=3",))
    profile = load_profile(run_dir / "profile.toml")
    real_lr = trainer_mod.lr_at
    monkeypatch.setattr(trainer_mod, "lr_at", lambda epoch, p: real_lr(epoch, p) if epoch == 1 else 1e30)
    events = EventWriter(run_dir / "events.jsonl", "run")
    t = trainer_mod.Trainer(run_dir, profile, make_runtime(profile.train), events, Progress(run_dir / "p.json"),
                            lambda: False)
    assert guarded(run_dir, events, t.fit) == 1
    events.close()
    last = events_of(run_dir)[-1]
    assert last["status"] == "failed" and "loss became" in last["error"]
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.dtype.is_floating_point)


def test_bad_profile_in_run_folder_exits_2(tmp_path):
    run_dir = tmp_path / "runs" / "bad"
    run_dir.mkdir(parents=True)
    (run_dir / "profile.toml").write_text("[train]\nepochs = -1\n")
    proc = run_engine(run_dir)
    assert proc.returncode == 2
    assert "train.epochs: must be at least 1" in proc.stderr


def test_second_engine_on_the_same_folder_is_refused(tmp_path, tiny_profile):
    run_dir = make_run_dir(tmp_path, tiny_profile(), overrides=("train.epochs=50",))
    proc = subprocess.Popen([sys.executable, "-m", "engine", "train", str(run_dir)], env=engine_env(), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (run_dir / "engine.json").exists())
        second = run_engine(run_dir)
        assert second.returncode == 2 and "already running" in second.stderr
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_one_lock_whoever_starts_the_engine(tmp_path, tiny_profile, monkeypatch):
    """The launcher takes engine.lock before the engine exists and hands it down: its engine trains (it does
    not refuse its own lock), and an engine started by hand on the same folder meanwhile is refused, as is a
    second launch; once the engine exits the lock is free."""
    from engine.contract.locks import is_locked
    from fairtui.runs.home import EngineRunning
    from fairtui.launch.launcher import GpuChoice, start_engine

    run_dir = make_run_dir(tmp_path, tiny_profile(), overrides=("train.epochs=100000",))
    monkeypatch.chdir(ROOT)
    for key, value in engine_env().items():
        monkeypatch.setenv(key, value)
    proc = start_engine(run_dir, GpuChoice.parse("cpu"))
    try:
        wait_for(lambda: proc.poll() is not None or (run_dir / "events.jsonl").exists()
                 and '"epoch_end"' in (run_dir / "events.jsonl").read_text(), timeout=300)
        assert proc.poll() is None, (run_dir / "engine.log").read_text()[-2000:]  # it did not refuse its own lock
        assert is_locked(run_dir / "engine.lock")
        by_hand = run_engine(run_dir)
        assert by_hand.returncode == 2 and "already running" in by_hand.stderr
        with pytest.raises(EngineRunning):
            start_engine(run_dir, GpuChoice.parse("cpu"))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not is_locked(run_dir / "engine.lock")


def test_lr_schedules():
    from engine.contract.config import Profile, TrainConfig
    from engine.training.trainer import lr_at

    p = Profile(train=TrainConfig(lr=0.1, epochs=200, milestones=(100, 150)))
    assert [lr_at(e, p) for e in (1, 100, 101, 150, 151)] == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001])
    c = Profile(train=TrainConfig(lr=0.1, epochs=10, schedule="cosine"))
    assert lr_at(1, c) == pytest.approx(0.1) and lr_at(6, c) == pytest.approx(0.05)
    assert math.isclose(lr_at(10, c), 0.1 * 0.5 * (1 + math.cos(math.pi * 0.9)))


def test_frl_best_checkpoint_never_comes_from_its_pretraining(tmp_path, tiny_profile, monkeypatch):
    """An FRL run whose pre-training epoch has the best validation score: `best.pt` is still an FRL epoch
    (neither FRL's paper nor its code selects across pre-training)."""
    from engine.training import trainer as trainer_mod
    from engine.contract.profile_io import load_profile
    from engine.contract.events import EventWriter
    from engine.methods.frl import FRL
    from engine.runtime.progress import Progress
    from engine.runtime.device import make_runtime

    run_dir = make_run_dir(tmp_path, tiny_profile(), overrides=(
        'method.name="frl"', "method.pretrain_epochs=2", "train.epochs=4", "method.finetune_lr=0.01"))
    profile = load_profile(run_dir / "profile.toml")
    scores = {1: 0.5, 2: 0.9, 3: 0.3, 4: 0.4}  # the pre-training's epoch 2 scores best
    monkeypatch.setattr(FRL, "selection_score", lambda self, val: scores[self.epoch])
    events = EventWriter(run_dir / "events.jsonl", "run")
    t = trainer_mod.Trainer(run_dir, profile, make_runtime(profile.train), events, Progress(run_dir / "p.json"),
                            lambda: False)
    t.fit()
    events.close()
    ends = [e for e in events_of(run_dir) if e["type"] == "epoch_end"]
    assert [e["is_best"] for e in ends] == [False, False, True, True]
    assert [e["best_epoch"] for e in ends] == [0, 0, 3, 4]
    assert torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)["epoch"] == 4


def test_frl_pretraining_must_leave_frl_epochs(tiny_profile):
    from engine.contract.profile_io import load_profile
    from engine.contract.profile_schema import ProfileError

    with pytest.raises(ProfileError, match="method.pretrain_epochs.*leave no frl epoch in train.epochs \\(3\\)"):
        load_profile(tiny_profile(), ['method.name="frl"', "method.pretrain_epochs=3", "train.epochs=3"])


def test_resume_removes_the_temporary_files_of_interrupted_checkpoint_writes(tmp_path, tiny_profile):
    """A kill inside a checkpoint write leaves `.last.pt.XXXX`; it is never loaded, and the resume deletes it."""
    run_dir = train_tiny(tmp_path, ("train.epochs=1",))
    ckpt = run_dir / "checkpoints"
    leftovers = [ckpt / ".last.pt.k1ll3d", ckpt / ".best.pt.k1ll3d"]
    for f in leftovers:
        f.write_bytes(b"half a checkpoint")
    keep = ckpt / "notes.txt"
    keep.write_text("mine")
    from engine.contract.profile_io import dumps_profile, load_profile

    profile = load_profile(run_dir / "profile.toml", ["train.epochs=2"])
    (run_dir / "profile.toml").write_text(dumps_profile(profile))
    proc = run_engine(run_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not any(f.exists() for f in leftovers) and keep.exists()
    assert "removed 2 temporary checkpoint file(s)" in proc.stderr


@pytest.mark.parametrize("content", ["", "name = \"x\"\n[train]\nepochs = 3\n"])
def test_a_run_folder_whose_profile_is_empty_or_cut_short_never_trains_on_defaults(tmp_path, content):
    """A full disk used to leave an empty profile.toml, and `resume` then trained with every default."""
    from tests.conftest import fairtui_cmd

    run_dir = tmp_path / "runs" / "20260101-000000-aaaaaa"
    run_dir.mkdir(parents=True)
    (run_dir / "profile.toml").write_text(content)
    (run_dir / "meta.json").write_text(json.dumps({"name": "cut"}))
    proc = run_engine(run_dir)
    assert proc.returncode == 2 and "missing from the run's resolved profile" in proc.stderr
    assert not (run_dir / "events.jsonl").exists() or "epoch_end" not in (run_dir / "events.jsonl").read_text()
    resumed = fairtui_cmd("resume", "aaaaaa", home=tmp_path)
    assert resumed.returncode == 2 and "the run cannot continue on defaults" in resumed.stderr
    assert len(resumed.stderr.strip().splitlines()) == 1


def test_a_checkpoint_with_the_weights_of_one_already_evaluated_shares_its_results(tmp_path):
    """Best is the last epoch (one epoch): the test split is attacked once, and `best` records the same
    numbers, marked as shared; those are the numbers a separate evaluation of `best` computes."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shared = train_tiny(tmp_path / "a", overrides=("train.epochs=1", 'eval.checkpoints=["last", "best"]'))
    results = {e["checkpoint"]: e for e in events_of(shared) if e["type"] == "eval_result"}
    assert set(results) == {"last", "best"}
    assert results["best"]["same_weights_as"] == "last" and "same_weights_as" not in results["last"]
    assert results["best"]["epoch"] == results["last"]["epoch"] == 1
    alone = train_tiny(tmp_path / "b", overrides=("train.epochs=1", 'eval.checkpoints=["best"]'))
    (computed,) = [e for e in events_of(alone) if e["type"] == "eval_result"]
    assert "same_weights_as" not in computed
    for key in ("clean_acc_per_class", "robust_acc_per_class", "avg_robust", "setting"):
        assert results["best"][key] == computed[key] == results["last"][key]
