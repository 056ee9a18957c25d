"""engine.entry.supervisor is a thin wrapper around torch.distributed's launcher (elastic_launch). What the
wrapper adds must hold: the ranks die with it, engine.json names them, and a failed run names the rank
that caused it (its own error first, from its failure file or the launcher's error file, else the rank
the launcher saw die, with its pid and signal)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.conftest import HANG_S, make_run_dir
from tests.engine.test_distributed import start, wait_for_epoch

pytest.importorskip("torch.distributed.launcher.api")


def failure(rank: int, pid: int, exitcode: int, when: float, error_file: str = "<N/A>"):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    f = ProcessFailure(local_rank=rank, pid=pid, exitcode=exitcode, error_file=error_file)
    f.timestamp = when
    return f


def test_the_reason_is_a_ranks_own_error_then_the_rank_the_launcher_saw_die():
    from engine.entry.supervisor import reason

    killed = failure(1, 4242, -signal.SIGKILL, 10.0)
    collective = failure(0, 4241, 1, 9.0)  # rank 0 saw its peer go first, and said so in its file
    seen = {0: {"rank": 0, "reason": "all-reduce failed on rank 0", "collective": True}}
    assert reason({0: collective, 1: killed}, seen) == ("rank 1 (pid 4242) was killed by SIGKILL; the other "
                                                        "ranks were stopped and the last checkpoint is kept")
    own = {**seen, 2: {"rank": 2, "reason": "DataError: cifar10 is missing", "collective": False}}
    assert reason({0: collective, 1: killed}, own) == "rank 2: DataError: cifar10 is missing"
    assert reason({3: failure(3, 1, 7, 1.0)}, {3: {"rank": 3, "reason": "x", "collective": True}}) == \
        "rank 3 exited with code 7"


def test_a_ranks_own_exception_reaches_the_launchers_error_file(tmp_path, monkeypatch):
    from engine.training.process import _told_to_launcher

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))

    def body():
        raise ValueError("the profile names no such data set")

    with pytest.raises(ValueError):
        _told_to_launcher(body)()
    told = failure(1, 99, 1, 5.0, str(error_file))
    assert told.message["message"] == "ValueError: the profile names no such data set"
    from engine.entry.supervisor import reason

    assert reason({1: told, 0: failure(0, 98, -signal.SIGKILL, 1.0)}, {}) == \
        "rank 1: ValueError: the profile names no such data set"
    error_file.unlink()

    def peer_lost():
        raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")

    with pytest.raises(RuntimeError):  # a peer's failure seen in a collective is not this rank's cause
        _told_to_launcher(peer_lost)()
    assert not error_file.exists()


def test_ranks_die_with_a_killed_supervisor_and_engine_json_names_them(tmp_path, tiny_profile):
    run_dir = make_run_dir(tmp_path, tiny_profile(), "run", ("train.epochs=400",))
    proc = start(run_dir, 2)
    wait_for_epoch(run_dir, 1, proc)
    info = json.loads((run_dir / "engine.json").read_text())
    assert info["pid"] == proc.pid and info["world_size"] == 2
    assert [r["rank"] for r in info["ranks"]] == [0, 1] and all(r["gpu"] is None for r in info["ranks"])
    pids = [r["pid"] for r in info["ranks"]]
    assert proc.pid not in pids
    proc.kill()
    proc.wait(timeout=HANG_S)
    end = time.time() + HANG_S
    alive = pids
    while alive and time.time() < end:
        alive = [p for p in pids if os.path.exists(f"/proc/{p}") and "engine" in open(f"/proc/{p}/cmdline").read()]
        time.sleep(0.1)
    assert not alive


def test_the_launch_config_takes_only_the_keys_this_torch_has(tmp_path, monkeypatch):
    """torch 2.11 (the first GPU machine's) has no LaunchConfig.shutdown_timeout: passing it anyway failed every
    multi-process run there with a TypeError before any rank started."""
    import dataclasses

    import torch.distributed.launcher.api as api

    from engine.entry import supervisor

    current = {f.name for f in dataclasses.fields(api.LaunchConfig)}
    Older = dataclasses.make_dataclass("Older", [(f.name, f.type, f) for f in dataclasses.fields(api.LaunchConfig)
                                                 if f.name not in ("shutdown_timeout", "virtual_local_rank")])
    monkeypatch.setattr(api, "LaunchConfig", Older)
    config = supervisor.launch_config(tmp_path, 2, on_gpus=True)
    assert isinstance(config, Older) and config.nproc_per_node == 2 and config.max_restarts == 0
    monkeypatch.undo()
    if {"shutdown_timeout", "virtual_local_rank"} <= current:  # this torch has both: both are passed
        config = supervisor.launch_config(tmp_path, 2, on_gpus=True)
        assert config.virtual_local_rank and config.shutdown_timeout == supervisor.SHUTDOWN_S


def test_two_processes_on_one_gpu_are_refused(monkeypatch):
    from engine.entry.supervisor import visible_devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,0")
    with pytest.raises(ValueError, match="GPU 0 to several"):
        visible_devices(2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,1")
    assert visible_devices(2) == ["0", "1"]
