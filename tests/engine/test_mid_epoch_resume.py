"""A stop inside an epoch keeps the epoch's work (checkpoints/partial.pt) and the resume continues from the
batch it stopped after, to the same numbers as a run never stopped: the data order, the RNG states, the
method's per-batch sums and the loop's counts all continue exactly.

The stop is placed, not timed: a small wrapper runs the engine with its stop flag set after batch N of
epoch E (training) or after validation batch N, as `fairtui stop` or Ctrl-C set it (the flag is what a
signal sets; tests/engine/test_training.py covers the signals themselves)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.conftest import HANG_S, ROOT, engine_env, events_of, make_run_dir, run_engine

STOPPER = """
import runpy, sys
import engine.training.trainer as t

epoch, phase, after = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sys.argv = ["engine", "train", sys.argv[4]]


def stop_after(n):
    calls = [0]

    def flag():
        calls[0] += 1
        return calls[0] >= n
    return flag


def wrapped(name, real):
    def run(self, e, *args):
        if e == epoch and phase == name:
            self.stop_flag = stop_after(after)
        return real(self, e, *args)
    return run


t.Trainer.train_epoch = wrapped("train", t.Trainer.train_epoch)
t.Trainer.validate = wrapped("val", t.Trainer.validate)
runpy.run_module("engine", run_name="__main__")
"""

# method, its settings, and where the stop lands: (epoch, phase, batch). 300 training images in batches of 50
# (6 a epoch), 50 validation images in batches of 50 by default (eval_batch_size 20 below: 3 batches)
CASES = {
    # PGD-AT with an EMA: model, optimiser momentum, EMA and RNG continue
    "pgd_at": (("train.ema_decay=0.5",), (2, "train", 2)),
    # DAFA's warm-up's last epoch gathers P batch by batch (its batch_state): the stop lands in it
    "dafa": (("method.warmup_epochs=2", "method.weight_floor=0.05"), (2, "train", 3)),
    # FAAL's fine-tune sums K p* per batch for the epoch's measurements
    "faal": (("method.pretrain_epochs=1",), (3, "train", 4)),
    # CSR measures its confusion matrix on the epoch's first model before training: replayed exactly
    "csr": (("method.pretrain_epochs=1",), (2, "train", 1)),
    # FRL stopped inside its first epoch: no last.pt yet, the run starts as it started (its initial val)
    "frl": (("method.pretrain_epochs=1", "method.finetune_lr=0.01"), (1, "train", 2)),
    # TRADES stopped in the validation: the epoch's training is kept and the validation starts again
    "trades": (("train.ema_decay=0.5", "data.eval_batch_size=20"), (2, "val", 2)),
}


def stop_inside(run_dir, epoch: int, phase: str, after: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STOPPER, str(epoch), phase, str(after), str(run_dir)],
                          env=engine_env(), cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)


@pytest.mark.parametrize("method", list(CASES))
def test_a_stop_inside_an_epoch_resumes_from_its_batch_to_the_same_numbers(tmp_path, tiny_profile, method):
    extra, (epoch, phase, after) = CASES[method]
    overrides = ("train.epochs=3", f"method.name={method}", *extra)
    profile = tiny_profile()
    straight = make_run_dir(tmp_path, profile, "straight", overrides)
    done = run_engine(straight)
    assert done.returncode == 0, done.stderr[-3000:]

    stopped = make_run_dir(tmp_path, profile, "stopped", overrides)
    proc = stop_inside(stopped, epoch, phase, after)
    assert proc.returncode == 130, proc.stderr[-3000:]
    kept = torch.load(stopped / "checkpoints" / "partial.pt", weights_only=True)
    assert (kept["epoch"], kept["phase"]) == (epoch, phase)
    if phase == "train":
        assert kept["batches_done"] == after < kept["batches"] == 6  # inside the epoch, not at its end
    assert [e["epoch"] for e in events_of(stopped) if e["type"] == "epoch_end"] == list(range(1, epoch))
    where = f"after batch {after} of 6" if phase == "train" else "in the validation"
    assert events_of(stopped)[-1]["status"] == "stopped"
    assert events_of(stopped)[-1]["error"] == \
        f"stopped by a signal {where} of epoch {epoch}; its work is kept: fairtui resume continues from there"

    resumed = run_engine(stopped)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not (stopped / "checkpoints" / "partial.pt").exists()  # taken up, and gone with its epoch
    b = events_of(stopped)
    back = [e for e in b if e["type"] == "run_resumed"]
    assert len(back) == 1 and back[0]["epoch"] == epoch - 1 and back[0]["phase"] == phase
    if phase == "train":
        assert back[0]["batch"] == after
        assert f"resumed in epoch {epoch}, after batch {after} of 6" in resumed.stderr

    a = events_of(straight)
    per_epoch = lambda evs: [(e["epoch"], e["train"], e["val"], e["method_state"], e["best_epoch"])  # noqa: E731
                             for e in evs if e["type"] == "epoch_end"]
    assert per_epoch(a) == per_epoch(b)  # training counts and loss, validation, class-wise state: all epochs
    finals = lambda evs: [(e["checkpoint"], e["clean_acc_per_class"], e["robust_acc_per_class"])  # noqa: E731
                          for e in evs if e["type"] == "eval_result"]
    assert finals(a) == finals(b)
    sa = torch.load(straight / "checkpoints" / "last.pt", weights_only=True)
    sb = torch.load(stopped / "checkpoints" / "last.pt", weights_only=True)
    for key in sa["model"]:
        assert torch.equal(sa["model"][key], sb["model"][key]), key
    if sa["ema"] is not None:
        for key in sa["ema"]:
            assert torch.equal(sa["ema"][key], sb["ema"][key]), key
    for key, value in sa["optimizer"]["state"].items():
        assert torch.equal(value["momentum_buffer"], sb["optimizer"]["state"][key]["momentum_buffer"])


def test_a_batch_state_left_out_would_be_seen(tmp_path, tiny_profile, monkeypatch):
    """The property above is not vacuous: DAFA resumed without its per-batch sums of P gives another W."""
    extra, (epoch, phase, after) = CASES["dafa"]
    overrides = ("train.epochs=3", "method.name=dafa", *extra)
    profile = tiny_profile()
    straight = make_run_dir(tmp_path, profile, "straight", overrides)
    assert run_engine(straight).returncode == 0
    stopped = make_run_dir(tmp_path, profile, "stopped", overrides)
    assert stop_inside(stopped, epoch, phase, after).returncode == 130
    path = stopped / "checkpoints" / "partial.pt"
    kept = torch.load(path, weights_only=True)
    kept["method_batch"] = {k: torch.zeros_like(v) for k, v in kept["method_batch"].items()}  # the sums lost
    torch.save(kept, path)
    assert run_engine(stopped).returncode == 0
    weights = lambda run: [e["method_state"]["dafa_weight"] for e in events_of(run)  # noqa: E731
                           if e["type"] == "epoch_end" and e["epoch"] == 3]
    assert weights(straight) != weights(stopped)


def test_a_partial_checkpoint_of_another_epoch_is_not_used(tmp_path, tiny_profile):
    """partial.pt that does not continue last.pt (a stale file) is set aside with a warning: the run
    resumes from last.pt as before."""
    overrides = ("train.epochs=3",)
    run_dir = make_run_dir(tmp_path, tiny_profile(), "run", overrides)
    assert stop_inside(run_dir, 2, "train", 2).returncode == 130
    path = run_dir / "checkpoints" / "partial.pt"
    kept = torch.load(path, weights_only=True)
    kept["epoch"] = 3
    torch.save(kept, path)
    resumed = run_engine(run_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "partial.pt is of epoch 3, not the epoch after the last checkpoint (1): not used" in resumed.stderr
    assert [e for e in events_of(run_dir) if e["type"] == "run_resumed"][0].get("batch") is None
    assert not path.exists()


def test_the_log_says_where_a_resumed_run_continues():
    from engine.contract.protocol import resumed_text

    assert resumed_text({"epoch": 4}) == "resumed after epoch 4"
    assert resumed_text({"epoch": 4, "phase": "train", "batch": 37, "batches": 390}) == \
        "resumed in epoch 5, after batch 37 of 390"
    assert resumed_text({"epoch": 0, "phase": "val", "batch": 6, "batches": 6}) == \
        "resumed in epoch 1, at its validation (its training was kept)"


def test_a_fine_tune_stopped_in_its_first_epoch_restarts_only_from_the_weights_it_began_with(tmp_path, tiny_profile):
    """Stopped inside its first epoch, a fine-tune starts that epoch again from init_from's checkpoint. If the file
    changed in between (its base resumed and found a new best), the resume is refused with exit 2 and nothing lost;
    with the file put back it continues to the numbers of a run never stopped."""
    profile = tiny_profile()
    base = make_run_dir(tmp_path, profile, "base", ("train.epochs=1",))
    assert run_engine(base).returncode == 0
    overrides = ("train.epochs=1", "method.name=frl", f"method.init_from={base}", "method.finetune_lr=0.01")
    straight = make_run_dir(tmp_path, profile, "straight", overrides)
    assert run_engine(straight).returncode == 0
    stopped = make_run_dir(tmp_path, profile, "stopped", overrides)
    assert stop_inside(stopped, 1, "train", 2).returncode == 130
    best = base / "checkpoints" / "best.pt"
    original = best.read_bytes()
    state = torch.load(best, weights_only=True)
    state["model"] = {k: v + 0.01 if v.is_floating_point() else v for k, v in state["model"].items()}
    torch.save(state, best)  # the base's best moved on

    refused = run_engine(stopped)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "has changed since this run started from it" in refused.stderr
    assert (stopped / "checkpoints" / "partial.pt").exists()  # the stopped epoch's work is kept

    best.write_bytes(original)
    resumed = run_engine(stopped)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    finals = lambda run: [(e["checkpoint"], e["robust_acc_per_class"])  # noqa: E731
                          for e in events_of(run) if e["type"] == "eval_result"]
    assert finals(stopped) == finals(straight)


def test_another_runs_partial_checkpoint_is_set_aside_and_the_run_ends_as_if_never_stopped(tmp_path, tiny_profile):
    """#71: partial.pt records what it continues (run, seed, resolved profile, the last.pt it follows). Another run's
    partial.pt copied over this run's (same epoch, same batch count) is set aside with one line naming what
    differs, and the resume restarts the epoch from last.pt: the run ends at the uninterrupted run's weights."""
    import shutil

    overrides = ("train.epochs=3",)
    profile = tiny_profile()
    straight = make_run_dir(tmp_path, profile, "straight", overrides)
    assert run_engine(straight).returncode == 0
    mine = make_run_dir(tmp_path, profile, "mine", overrides)
    other = make_run_dir(tmp_path, profile, "other", (*overrides, "seed=11", "train.lr=0.09"))
    assert stop_inside(mine, 2, "train", 2).returncode == 130
    assert stop_inside(other, 2, "train", 3).returncode == 130
    shutil.copy(other / "checkpoints" / "partial.pt", mine / "checkpoints" / "partial.pt")
    resumed = run_engine(mine)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "partial.pt is not this run's: the run differs ('other' against this run's 'mine')" in resumed.stderr
    assert "set aside as partial.pt.set-aside-" in resumed.stderr
    assert [e for e in events_of(mine) if e["type"] == "run_resumed"][0].get("batch") is None
    sa = torch.load(straight / "checkpoints" / "last.pt", weights_only=True)
    sb = torch.load(mine / "checkpoints" / "last.pt", weights_only=True)
    for key in sa["model"]:
        assert torch.equal(sa["model"][key], sb["model"][key]), key


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "fifo"])
def test_a_damaged_partial_checkpoint_never_blocks_the_run(tmp_path, tiny_profile, damage):
    """#71: a partial.pt cut short, emptied, overwritten or replaced by a FIFO (which would hang a reader) is set
    aside with one line, and the resume starts the epoch again from last.pt, as after a kill: the run completes."""
    import os

    run_dir = make_run_dir(tmp_path, tiny_profile(), "run", ("train.epochs=3",))
    assert stop_inside(run_dir, 2, "train", 2).returncode == 130
    path = run_dir / "checkpoints" / "partial.pt"
    data = path.read_bytes()
    path.unlink()
    if damage == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"not a checkpoint"}[damage])
    resumed = run_engine(run_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    reason = "is not a plain file" if damage == "fifo" else "cannot be read"
    assert f"partial.pt {reason}" in resumed.stderr and "the epoch starts again from the last checkpoint" in \
        resumed.stderr
    assert events_of(run_dir)[-1]["status"] == "completed"
