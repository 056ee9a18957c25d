"""A run across nodes, started by torch's own launcher as the README's command starts it: two "nodes" as
two `torchrun` processes on 127.0.0.1 with a c10d rendezvous, one gloo rank each. What must hold: it trains
the numbers of the 2-rank run on one node, rank 0 alone writes the run folder, a node whose rank dies
ends the run `failed` with the checkpoint kept, and `resume` continues it on one node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import HANG_S, ROOT, engine_env, free_port, make_run_dir, set_epochs
from tests.engine.test_distributed import events_of, max_weight_difference, train

pytest.importorskip("torch.distributed.run")


def start_nodes(run_dir: Path, nodes: int = 2) -> list[subprocess.Popen]:
    """The README's command, once per node: torchrun --nnodes N --nproc-per-node 1 --rdzv-backend c10d ..."""
    port, rdzv_id = free_port(), f"test-{os.getpid()}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", rdzv_id,
           "--max-restarts", "0", "-m", "engine", "train", str(run_dir)]
    env = engine_env()
    env["OMP_NUM_THREADS"] = "1"
    return [subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             start_new_session=True) for _ in range(nodes)]


def wait_all(procs: list[subprocess.Popen], timeout: float = HANG_S) -> list[int]:
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


def tails(procs: list[subprocess.Popen]) -> str:
    """Both nodes' stderr (launcher and rank), for the message of a failed assertion."""
    return "\n".join(f"--- node {i} (exit {p.poll()}) ---\n{p.stderr.read()[-6000:]}" for i, p in enumerate(procs))


def test_two_nodes_train_the_one_node_run_and_rank_zero_alone_writes(tmp_path, tiny_profile):
    profile = tiny_profile()
    one_node, two_nodes = make_run_dir(tmp_path, profile, "one-node"), make_run_dir(tmp_path, profile, "two-nodes")
    assert train(one_node, 2).returncode == 0
    procs = start_nodes(two_nodes)
    codes = wait_all(procs)
    assert codes == [0, 0], tails(procs)
    events = events_of(two_nodes)
    assert [e["seq"] for e in events] == list(range(len(events)))  # one writer
    assert [e["type"] for e in events].count("run_started") == 1
    assert events_of(two_nodes, "run_started")[0]["distributed"]["world_size"] == 2
    assert events_of(two_nodes, "run_started")[0]["distributed"]["nodes"] == 2
    for a, b in zip(events_of(one_node, "epoch_end"), events_of(two_nodes, "epoch_end")):
        for part in ("train", "val"):
            assert a[part]["robust_acc_per_class"] == b[part]["robust_acc_per_class"]
        assert len(set(b["distributed"]["model_digest_per_rank"])) == 1
    results = lambda d: {(e["checkpoint"], e["attack"]): e["robust_acc_per_class"]  # noqa: E731
                         for e in events_of(d, "eval_result")}
    assert results(one_node) == results(two_nodes)
    assert max_weight_difference(one_node, two_nodes) < 1e-5
    assert json.loads((two_nodes / "engine.json").read_text())["command"] == "train"
    assert events_of(two_nodes, "run_finished")[-1]["status"] == "completed"


def test_a_node_whose_rank_dies_fails_the_run_and_it_resumes_on_one_node(tmp_path, tiny_profile):
    run_dir = make_run_dir(tmp_path, tiny_profile(), "run", ("train.epochs=400",))
    procs = start_nodes(run_dir)
    end = time.time() + HANG_S
    while not any(e["epoch"] >= 3 for e in events_of(run_dir, "epoch_end")):
        assert time.time() < end and all(p.poll() is None for p in procs), tails(procs)
        time.sleep(0.05)
    rank0 = json.loads((run_dir / "engine.json").read_text())["pid"]
    out = subprocess.run(["pgrep", "-f", f"engine train {run_dir}$"], capture_output=True, text=True).stdout.split()
    ranks = [int(p) for p in out if int(p) != rank0 and "torch.distributed.run" not in
             Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
    assert len(ranks) == 1, out
    os.kill(ranks[0], signal.SIGKILL)  # the other node's rank
    codes = wait_all(procs)
    assert all(c != 0 for c in codes)
    finished = events_of(run_dir, "run_finished")[-1]
    assert finished["status"] == "failed"
    # rank 0 saw only gloo's "connection closed"; the killed rank is named from the run folder
    assert finished["error"].startswith(f"rank 1 (pid {ranks[0]} on ") and "without recording an error" in finished["error"]
    assert not list(run_dir.glob(".rank*.failed"))
    last = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["epoch"]
    assert last >= 3
    with pytest.raises(ProcessLookupError):
        os.kill(rank0, 0)
    # resume on one node, two ranks, for a short remainder
    set_epochs(run_dir, last + 2)
    res = train(run_dir, 2)
    assert res.returncode == 0, res.stderr[-2000:]
    assert events_of(run_dir, "run_resumed")[-1]["epoch"] == last
    assert sorted({e["epoch"] for e in events_of(run_dir, "epoch_end")}) == list(range(1, last + 3))
    assert events_of(run_dir, "run_finished")[-1]["status"] == "completed"


def test_rank_zero_names_the_peer_that_failed_from_the_run_folder(tmp_path):
    """What rank 0 under torchrun says when a collective failed: a peer's own error first, else the
    peers that left nothing (with their pid and host), else what it saw itself."""
    from engine.training.process import peer_failure, write_failure

    members = [{"rank": r, "pid": 100 + r, "host": f"node{r}"} for r in range(4)]
    seen = "PeerLost: all-reduce failed: Connection closed by peer"
    write_failure(tmp_path, 1, "PeerLost: Connection closed by peer", collective=True)
    write_failure(tmp_path, 3, "DataError: batch 7 of shard 3 is unreadable", collective=False)
    assert peer_failure(tmp_path, 4, members, seen, grace_s=5) == "rank 3: DataError: batch 7 of shard 3 is unreadable"
    assert not list(tmp_path.glob(".rank*.failed"))  # read, then removed

    write_failure(tmp_path, 1, "PeerLost: Connection closed by peer", collective=True)
    start = time.monotonic()
    said = peer_failure(tmp_path, 4, members, seen, grace_s=0.3)
    assert time.monotonic() - start >= 0.3  # it waited for the others
    assert said.startswith("rank 2 (pid 102 on node2), rank 3 (pid 103 on node3) were lost") and said.endswith(seen)

    for rank in (1, 2, 3):
        write_failure(tmp_path, rank, "PeerLost: timed out", collective=True)
    start = time.monotonic()
    assert peer_failure(tmp_path, 4, members, seen, grace_s=30) == seen
    assert time.monotonic() - start < 25  # every peer answered: no wait for the grace
