"""A checkpoint carries its run's identity (#88 item 4): last.pt and best.pt name the run folder they were written
for; one copied from another run over this run's is set aside under another name and refused in one line, by a
resume and by an evaluation, never taken up to give numbers that belong to neither run."""

from __future__ import annotations

import shutil

import torch

from tests.conftest import events_of, make_run_dir, run_engine, set_epochs


def two_runs(tmp_path, profile):
    """Run "other" (seed 5) and run "mine" (seed 3), one epoch each, trained."""
    other = make_run_dir(tmp_path, profile, "other", ("train.epochs=1", "seed=5"))
    mine = make_run_dir(tmp_path, profile, "mine", ("train.epochs=1",))
    for run in (other, mine):
        assert run_engine(run).returncode == 0
    return other, mine


def test_a_last_checkpoint_copied_from_another_run_is_set_aside_and_refused(tmp_path, tiny_profile):
    other, mine = two_runs(tmp_path, tiny_profile())
    state = torch.load(mine / "checkpoints" / "last.pt", weights_only=True)
    assert state["identity"] == {"run_id": "mine", "seed": 3}
    assert torch.load(mine / "checkpoints" / "best.pt", weights_only=True)["identity"]["run_id"] == "mine"
    for name in ("last.pt", "best.pt"):  # the other run's checkpoints over this run's
        shutil.copy(other / "checkpoints" / name, mine / "checkpoints" / name)
    set_epochs(mine, 2)
    proc = run_engine(mine)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = [ln for ln in proc.stderr.splitlines() if "is run other's" in ln]
    assert line and "not this run's (mine)" in line[0] and "set aside as last.pt.set-aside-" in line[0]
    assert not (mine / "checkpoints" / "last.pt").exists()
    assert list((mine / "checkpoints").glob("last.pt.set-aside-*"))  # kept, under another name
    assert [e["epoch"] for e in events_of(mine) if e["type"] == "epoch_end"] == [1]  # nothing trained on it
    assert events_of(mine)[-1]["type"] == "run_finished" and events_of(mine)[-1]["status"] == "failed"


def test_an_evaluation_refuses_a_best_checkpoint_of_another_run(tmp_path, tiny_profile):
    from tests.conftest import fairtui_cmd

    other, mine = two_runs(tmp_path, tiny_profile())
    shutil.copy(other / "checkpoints" / "best.pt", mine / "checkpoints" / "best.pt")
    proc = fairtui_cmd("eval", "mine", "--checkpoint", "best", "--attack", "pgd20", home=tmp_path)
    assert proc.returncode != 0 and "best.pt is run other's" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
