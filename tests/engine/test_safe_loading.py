"""Nothing in a profile or a run folder runs code: every checkpoint load refuses a crafted pickle."""

import json
import os

import pytest
import torch

from engine.runtime.checkpoint import CheckpointError, load_checkpoint
from tests.conftest import events_of, fairtui_cmd, make_run_dir, run_engine, train_tiny


class Payload:
    """Unpickling this runs a shell command (what a crafted .pt shared with a profile can do)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def crafted(path, marker):
    torch.save({"model": Payload(marker), "epoch": 1, "optimizer": {}, "rng": {}}, path)
    return path


def test_load_checkpoint_refuses_code_and_runs_none_of_it(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(crafted(tmp_path / "evil.pt", marker))
    assert not marker.exists()
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a fairtui checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_a_checkpoint_with_an_old_numpy_rng_state_still_loads(tmp_path):
    import numpy as np

    torch.save({"model": {}, "rng": {"numpy": np.random.get_state()}}, tmp_path / "old.pt")
    state = load_checkpoint(tmp_path / "old.pt")
    assert state["rng"]["numpy"][0] == "MT19937"


def test_init_from_a_crafted_pickle_exits_2_and_runs_nothing(tmp_path, tiny_profile):
    marker = tmp_path / "pwned"
    evil = crafted(tmp_path / "evil.pt", marker)
    run_dir = make_run_dir(tmp_path, tiny_profile(), overrides=('method.name="frl"', f'method.init_from="{evil}"'))
    proc = run_engine(run_dir)
    assert proc.returncode == 2
    assert not marker.exists()
    finished = [e for e in events_of(run_dir) if e["type"] == "run_finished"][-1]
    assert finished["status"] == "failed" and "method.init_from" in finished["error"] and "refused" in finished["error"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("safe"), ("train.epochs=1",))


@pytest.mark.parametrize("name", ["last.pt", "best.pt"])
def test_a_tampered_run_folder_is_refused_by_resume_and_eval(trained, tmp_path, name):
    marker = tmp_path / "pwned"
    path = trained / "checkpoints" / name
    original = path.read_bytes()
    try:
        crafted(path, marker)
        home = trained.parent.parent
        checkpoint = "best" if name == "best.pt" else "last"
        ev = fairtui_cmd("eval", trained.name, "--attack", "clean", "--checkpoint", checkpoint, "--force", home=home)
        assert ev.returncode == 2 and "refused" in ev.stderr, ev.stderr
        if name == "last.pt":
            assert run_engine(trained).returncode == 2  # resume
        assert not marker.exists()
    finally:
        path.write_bytes(original)
    assert json.loads((trained / "events.jsonl").read_text().splitlines()[0])["type"] == "run_started"
