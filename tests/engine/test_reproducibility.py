"""What a run records about its determinism, and the deterministic mode's promise on one machine."""

import hashlib

import torch

from tests.conftest import events_of, train_tiny


def model_digest(run_dir) -> str:
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(key.encode())
        h.update(state[key].cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_deterministic_mode_is_recorded_and_two_runs_are_bit_identical(tmp_path):
    # threads = 0 in the profile: the deterministic mode fixes the CPU thread count at 1
    overrides = ("train.deterministic=true", "train.threads=0", 'method.name="trades"')
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = train_tiny(tmp_path / "a", overrides)
    b = train_tiny(tmp_path / "b", overrides)
    det = events_of(a)[0]["provenance"]["determinism"]
    assert det["deterministic_algorithms"] is True and det["cudnn_deterministic"] is True
    assert det["cudnn_benchmark"] is False and det["threads"] == 1
    assert det["env"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert model_digest(a) == model_digest(b)
    ends = lambda run: [(e["val"], e["train"]["loss"]) for e in events_of(run) if e["type"] == "epoch_end"]  # noqa
    assert ends(a) == ends(b)


def test_every_run_records_its_thread_count_and_switches(tmp_path):
    run = train_tiny(tmp_path, ("train.threads=2",))
    det = events_of(run)[0]["provenance"]["determinism"]
    assert det["threads"] == 2 and det["deterministic_algorithms"] is False
    assert {"interop_threads", "cpu_count", "cpu_capability", "cudnn_deterministic", "env"} <= set(det)
