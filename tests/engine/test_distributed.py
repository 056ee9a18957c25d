"""One run on several processes (DDP), on the CPU with gloo and 2 processes.

What must hold: the 2-process run is the 1-process run (the same numbers where
the arithmetic allows it), rank 0 alone writes, every rank holds the same state,
a dead rank ends the run `failed` and it resumes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.attacks.noise import WHOLE
from engine.training.distributed import Group, fingerprint
from engine.contract.events import read_events
from tests.conftest import HANG_S, ROOT, engine_env, free_port, make_run_dir, set_epochs


def train(run_dir: Path, nproc: int, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "train", str(run_dir), "--nproc", str(nproc)],
                          env=engine_env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def start(run_dir: Path, nproc: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "engine", "train", str(run_dir), "--nproc", str(nproc)],
                            env=engine_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)


def events_of(run_dir: Path, kind: str | None = None) -> list[dict]:
    events, warnings = read_events(run_dir / "events.jsonl")
    assert not warnings
    return [e for e in events if kind is None or e["type"] == kind]


def wait_for_epoch(run_dir: Path, epoch: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if any(e["epoch"] >= epoch for e in events_of(run_dir, "epoch_end")):
            return
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    raise AssertionError(f"epoch {epoch} not reached")


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


def max_weight_difference(a: Path, b: Path) -> float:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    return max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)


# -- pure parts ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,world", [(50, 2), (49, 2), (2, 2), (7, 3), (128, 8), (3, 4)])
def test_shards_cover_the_batch_once_in_order(n, world):
    shards = [Group(rank=r, world=world).shard(n) for r in range(world)]
    assert shards[0][0] == 0 and shards[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(shards, shards[1:]))
    sizes = [hi - lo for lo, hi in shards]
    assert max(sizes) - min(sizes) <= 1 and sizes == Group(world=world).shard_sizes(n)


def test_sharded_draws_are_the_rows_of_the_whole_batch_draw():
    x = torch.zeros(10, 3, 4, 4)
    torch.manual_seed(5)
    whole = (WHOLE.rand_like(x), WHOLE.randn_like(x), WHOLE.rand_rows(x))
    parts = []
    for rank in (0, 1):
        draws = Group(rank=rank, world=2).draws(10)
        assert draws.lockstep and (draws.lo, draws.hi) == ((0, 5), (5, 10))[rank]
        torch.manual_seed(5)
        rows = x[draws.lo:draws.hi]
        parts.append((draws.rand_like(rows), draws.randn_like(rows), draws.rand_rows(rows)))
    for i in range(3):
        assert torch.equal(torch.cat([p[i] for p in parts]), whole[i])
    one = Group().draws(10)  # one process: the batch's own draws, and an attack may stop early
    assert (one.lo, one.hi, one.lockstep) == (0, 10, False)


def test_scale_loss_makes_the_ranks_mean_the_global_batch_mean():
    # shards of 3 and 2 of a batch of 5: DDP averages (3 * 2 / 5) m0 and (2 * 2 / 5) m1 = the global mean
    loss = torch.tensor(1.0)
    weights = [float(Group(rank=r, world=2).scale_loss(loss, Group(rank=r, world=2).draws(5))) for r in (0, 1)]
    assert weights == pytest.approx([1.2, 0.8]) and sum(weights) / 2 == pytest.approx(1.0)
    assert Group().scale_loss(loss, Group().draws(5)) is loss


def test_fingerprints_tell_equal_state_from_changed_or_permuted_state():
    state = {"lam": torch.tensor([0.1, 0.2, 0.3]), "fawa": {"w": torch.ones(2, 2)}, "epoch": 3}
    names, a = fingerprint(state)
    assert names == ["epoch", "fawa.w", "lam"]
    _, same = fingerprint({"lam": torch.tensor([0.1, 0.2, 0.3]), "fawa": {"w": torch.ones(2, 2)}, "epoch": 3})
    _, swapped = fingerprint({**state, "lam": torch.tensor([0.2, 0.1, 0.3])})  # the same sum
    _, nudged = fingerprint({**state, "lam": torch.tensor([0.1, 0.2, 0.3 + 1e-7])})
    assert torch.equal(a, same) and not torch.equal(a, swapped) and not torch.equal(a, nudged)


# -- collectives in 2 gloo processes -------------------------------------------------------------------
COLLECTIVES = textwrap.dedent("""
    import json, os, sys
    import torch
    from engine.training.distributed import Group, RankMismatch
    from engine.training.sync_bn import GroupBatchNorm, convert_sync_bn
    g = Group.from_env()
    g.init(torch.device("cpu"), 60)
    out = {}
    # GroupBatchNorm on each rank's half = BatchNorm2d on the whole batch: outputs, input and
    # parameter gradients (DDP averages the latter), running statistics.
    torch.manual_seed(0)
    x = torch.randn(12, 3, 5, 5) * 2 + 1
    w = torch.randn(12, 3, 5, 5)
    ref = torch.nn.BatchNorm2d(3)
    ref.weight.data.uniform_(0.5, 1.5); ref.bias.data.uniform_(-1, 1)
    net = convert_sync_bn(torch.nn.Sequential(ref), torch.device("cpu"))
    assert isinstance(net[0], GroupBatchNorm)
    xr = x.clone().requires_grad_(True)
    y_ref = ref(xr)
    ((y_ref * w).sum() / 12).backward()
    lo, hi = g.shard(12)
    xs = x[lo:hi].clone().requires_grad_(True)
    y = net(xs)
    # each rank's mean over its shard, weighted by its share as the trainer does
    ((y * w[lo:hi]).sum() / (hi - lo) * (hi - lo) * g.world / 12).backward()
    pgrad = torch.stack([net[0].weight.grad, net[0].bias.grad])
    g.sum_(pgrad)
    pgrad /= g.world
    out["bn_out"] = float((y - y_ref[lo:hi]).abs().max())
    net.eval(); ref.eval()
    out["bn_eval"] = float((net(x) - ref(x)).abs().max())
    # A rank's loss is W times its share of the global mean, so its input gradient is W times the
    # global one; DDP's average over the ranks brings the parameters' gradients back to the global ones.
    out["bn_input_grad"] = float((xs.grad / g.world - xr.grad[lo:hi]).abs().max())
    out["bn_param_grad"] = float((pgrad - torch.stack([ref.weight.grad, ref.bias.grad])).abs().max())
    out["bn_running"] = float(max((net[0].running_mean - ref.running_mean).abs().max(),
                                  (net[0].running_var - ref.running_var).abs().max()))
    # check_identical: equal state passes; one rank's changed value is named.
    g.check_identical({"lam": torch.tensor([1.0, 2.0])}, "test")
    try:
        g.check_identical({"lam": torch.tensor([1.0, 2.0 + g.rank])}, "after epoch 3")
        out["mismatch"] = None
    except RankMismatch as err:
        out["mismatch"] = str(err)
    out["any"] = [g.any(g.rank == 1), g.any(False)]
    print(json.dumps(out))
    g.close()
""")


def test_collectives_on_two_gloo_processes(tmp_path):
    script = tmp_path / "collectives.py"
    script.write_text(COLLECTIVES)
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**engine_env(), "RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r),
                                              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for r in range(2)]
    outs = [p.communicate(timeout=HANG_S) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    for stdout, _ in outs:
        res = json.loads(stdout.strip().splitlines()[-1])
        assert res["bn_out"] < 1e-5 and res["bn_eval"] < 1e-5 and res["bn_running"] < 1e-5
        assert res["bn_input_grad"] < 1e-5 and res["bn_param_grad"] < 1e-5
        assert res["mismatch"] == ("after epoch 3: rank 1's lam differs from rank 0's; the ranks no longer "
                                   "compute the same run")
        assert res["any"] == [True, False]


# -- whole runs -----------------------------------------------------------------------------------------
# One process and two agree to float rounding in fp32, which is what these tests claim. On a CPU with bf16 units
# "auto" trains in bf16 (#57), whose rounding of each shard's gradient against the whole batch's moves per-class
# numbers: the parity runs pin fp32.
FP32 = ('train.amp="none"',)


def test_two_ranks_train_the_one_process_run_and_rank_zero_alone_writes(tmp_path, tiny_profile):
    """small_cnn has no BatchNorm: with the shards' attack starts drawn as for the whole batch and
    DDP's gradient average, 2 processes give the 1-process run's numbers."""
    profile = tiny_profile()
    one, two = make_run_dir(tmp_path, profile, "one", FP32), make_run_dir(tmp_path, profile, "two", FP32)
    assert train(one, 1).returncode == 0
    res = train(two, 2)
    assert res.returncode == 0, res.stderr
    events = events_of(two)
    assert [e["seq"] for e in events] == list(range(len(events)))  # one writer, no gap, no repeat
    assert [e["type"] for e in events].count("run_started") == 1
    assert [e["epoch"] for e in events_of(two, "epoch_end")] == [1, 2]
    started = events_of(two, "run_started")[0]
    assert started["distributed"] == {"world_size": 2, "nodes": 1, "backend": "gloo", "sync_bn": False,
                                      "global_batch_size": 50, "batch_per_rank": [25, 25]}
    for e1, e2 in zip(events_of(one, "epoch_end"), events_of(two, "epoch_end")):
        d = e2["distributed"]
        # every sample counted once: the all-reduced counts are the whole split, summed over the ranks
        assert e2["train"]["count_per_class"] == started["split_sizes"]["train"] == e1["train"]["count_per_class"]
        assert d["samples_per_rank"] == [150, 150]
        assert len(set(d["model_digest_per_rank"])) == 1 and len(set(d["method_digest_per_rank"])) == 1
        for part in ("train", "val"):
            for key in ("clean_acc_per_class", "robust_acc_per_class"):
                assert e2[part][key] == e1[part][key], (part, key)
        assert e2["train"]["loss"] == pytest.approx(e1["train"]["loss"], abs=1e-6)
    assert "distributed" not in events_of(one, "epoch_end")[0]
    r1 = {(e["checkpoint"], e["attack"]): e["robust_acc_per_class"] for e in events_of(one, "eval_result")}
    r2 = {(e["checkpoint"], e["attack"]): e["robust_acc_per_class"] for e in events_of(two, "eval_result")}
    assert r1 == r2
    assert max_weight_difference(one, two) < 1e-5
    info = json.loads((two / "engine.json").read_text())
    assert info["world_size"] == 2 and [r["rank"] for r in info["ranks"]] == [0, 1]
    assert not list(two.glob(".rank*")) and not (two / ".launcher").exists()  # the launcher's files are gone
    assert all(not k.startswith("module.") for k in weights(two))  # loads into a 1-process run


@pytest.mark.parametrize("method", [('method.name="dafa"', 'method.base="pgd_at"', "method.warmup_epochs=1",
                                     "method.weight_floor=0.05"),
                                    ('method.name="faal"', "method.pretrain_epochs=1")], ids=["dafa", "faal"])
def test_two_ranks_train_dafa_and_faal_as_one_process(tmp_path, tiny_profile, method):
    """DAFA's P and FAAL's class scores are all-reduced: two ranks gather the one-process P and W, and
    weigh every batch with the one-process p* (the same numbers, to float rounding). DAFA on PGD-AT:
    TRADES's KL attack flips the sign of near-zero gradients under the shards' different rounding (2% of
    its pixels, docs/profiles-and-methods.md), which moves a TRADES P by 4e-5 between 1 and 2 ranks."""
    profile = tiny_profile()
    one, two = (make_run_dir(tmp_path, profile, name, method + FP32) for name in ("one", "two"))
    assert train(one, 1).returncode == 0
    res = train(two, 2)
    assert res.returncode == 0, res.stderr
    for e1, e2 in zip(events_of(one, "epoch_end"), events_of(two, "epoch_end"), strict=True):
        assert e2["val"]["robust_acc_per_class"] == e1["val"]["robust_acc_per_class"]
        assert e2["method_state"].keys() == e1["method_state"].keys()
        for key, value in e1["method_state"].items():
            if isinstance(value, list):
                assert np.allclose(np.array(e2["method_state"][key], dtype=float), np.array(value, dtype=float),
                                   atol=1e-5), key
    assert "dafa_weight" in events_of(two, "epoch_end")[-1]["method_state"] or \
        "faal_weight_mean" in events_of(two, "epoch_end")[-1]["method_state"]
    # The weights: equal to float rounding, which PGD's sign() can turn into a whole step for a pixel whose
    # gradient is near zero. On this project's 2-core machine DAFA's weights ended 2.3e-4 apart (2026-11-25,
    # at this commit and at earlier ones that had passed with 1e-5 on another machine), with every epoch's
    # per-class numbers and method state equal above; a rank training on the wrong shard or weight moves
    # them by far more.
    assert max_weight_difference(one, two) < 1e-3


CFA = ('method.name="cfa"', 'method.base="trades"', "method.fawa_start_epoch=1", "method.fawa_threshold=0")
WRN = ['model.arch="wide_resnet"', "model.depth=10", "model.width=1", "train.epochs=1", "train.deterministic=true",
       'eval.attacks=["clean"]']


def test_sync_bn_makes_two_ranks_train_the_one_process_weights(tmp_path, tiny_profile):
    """WRN-10-1 has BatchNorm. With train.sync_bn a 2-rank PGD-AT epoch equals the 1-process epoch to
    1e-5 (float rounding of the all-reduced sums; measured 1.2e-7). Batch 149 gives shards of 75 and
    74 and a last batch of 2 (1 per rank): the loss weighting makes DDP's average the whole batch's
    gradient, and the random starts are the whole batch's. Without sync_bn, where each rank normalises
    its half batch, such comparisons differed by about 2e-2 when this was written.

    Why three steps of PGD-AT and not a longer run: sign() in an attack step turns float rounding into
    a different step for a pixel, so longer adversarial runs differ in any two setups, one process
    with 1 and with 2 threads included (9e-3 after one TRADES epoch on digits). Natural training over
    6 steps also agreed to 1.2e-7 when this was written."""
    profile = tiny_profile()
    adv = WRN + ["data.batch_size=149", *FP32]
    a1 = make_run_dir(tmp_path, profile, "a1", tuple(adv))
    a2 = make_run_dir(tmp_path, profile, "a2", tuple(adv + ["train.sync_bn=true"]))
    for run_dir, nproc in ((a1, 1), (a2, 2)):
        res = train(run_dir, nproc)
        assert res.returncode == 0, res.stderr
    assert events_of(a2, "run_started")[0]["distributed"]["sync_bn"] is True
    assert max_weight_difference(a1, a2) < 1e-5
    assert events_of(a2, "epoch_end")[0]["distributed"]["samples_per_rank"] == [151, 149]  # 75+75+1, 74+74+1


def test_a_stopped_or_killed_group_ends_cleanly_and_resumes_to_completion(tmp_path, tiny_profile):
    # CFA on TRADES with FAWA: its class-wise state is checked identical on both ranks every epoch too
    run_dir = make_run_dir(tmp_path, tiny_profile(), "run", ("train.epochs=24",) + CFA)
    # stop: SIGTERM to the supervisor (what `fairtui stop` sends); the ranks stop at the same batch
    proc = start(run_dir, 2)
    wait_for_epoch(run_dir, 2, proc)
    os.kill(json.loads((run_dir / "engine.json").read_text())["pid"], signal.SIGTERM)
    assert proc.wait(timeout=HANG_S) == 130
    assert events_of(run_dir, "run_finished")[-1]["status"] == "stopped"
    # a rank killed: the run fails within the grace, names the rank, keeps the checkpoint
    proc = start(run_dir, 2)
    wait_for_epoch(run_dir, 5, proc)
    info = json.loads((run_dir / "engine.json").read_text())
    killed = time.time()
    os.kill(info["ranks"][1]["pid"], signal.SIGKILL)
    assert proc.wait(timeout=HANG_S) == 1
    assert time.time() - killed < 30
    finished = events_of(run_dir, "run_finished")[-1]
    assert finished["status"] == "failed"
    assert f"rank 1 (pid {info['ranks'][1]['pid']}) was killed by SIGKILL" in finished["error"]
    for rank in info["ranks"]:  # no rank left behind
        with pytest.raises(ProcessLookupError):
            os.kill(rank["pid"], 0)
    last = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["epoch"]
    assert last >= 5
    # 24 epochs, so that both signals land mid-run on any machine; the resumed remainder is two epochs
    set_epochs(run_dir, last + 2)
    res = train(run_dir, 2)
    assert res.returncode == 0, res.stderr
    assert [e["epoch"] for e in events_of(run_dir, "run_resumed")][-1] == last
    ends = sorted({e["epoch"] for e in events_of(run_dir, "epoch_end")})
    assert ends == list(range(1, last + 3))
    assert events_of(run_dir, "run_finished")[-1]["status"] == "completed"
    assert events_of(run_dir, "eval_result")
    for e in events_of(run_dir, "epoch_end"):
        assert len(set(e["distributed"]["method_digest_per_rank"])) == 1
        assert "beta_per_class" in e["method_state"] and "fawa_accepted" in e["method_state"]


@pytest.mark.parametrize("method", [
    ['method.name="frl"', "method.pretrain_epochs=1"],
    ['method.name="wat"'],
], ids=["frl", "wat"])
def test_class_wise_state_is_identical_on_every_rank_after_each_epoch(tmp_path, tiny_profile, method):
    """The engine checks every rank's weights and method state after each epoch and fails the run on
    a difference; the digests it records are equal, and the state is the method's own. (CFA: in the
    stop / kill / resume test.)"""
    run_dir = make_run_dir(tmp_path, tiny_profile(), "run", tuple(method + ["train.epochs=3"]))
    res = train(run_dir, 2)
    assert res.returncode == 0, res.stderr
    ends = events_of(run_dir, "epoch_end")
    assert [e["epoch"] for e in ends] == [1, 2, 3]
    for e in ends:
        assert len(set(e["distributed"]["method_digest_per_rank"])) == 1
        assert len(set(e["distributed"]["model_digest_per_rank"])) == 1
    state = ends[-1]["method_state"]
    key = {"frl": "lambda_bndy", "wat": "val_cost_sum"}[method[0].split('"')[1]]
    assert key in state and state[key] is not None


def test_fairtui_resume_continues_a_two_rank_run_on_two_ranks(tmp_path, tiny_profile):
    """A run started by `python -m engine train RUN --nproc 2` (meta.json names no devices) used to continue
    on one process under `fairtui resume`, silently, to other weights. It takes the world size from its own
    events, and ends with the uninterrupted 2-rank run's weights."""
    from fairtui.cli.resume import resume_world_size
    from fairtui.launch.launcher import GpuChoice
    from tests.conftest import fairtui_cmd

    home = tmp_path / "home"
    run_dir = make_run_dir(home, tiny_profile(), "two", ("train.epochs=4",))
    reference = make_run_dir(home, tiny_profile(), "reference", ("train.epochs=4",))
    assert train(reference, 2).returncode == 0
    proc = start(run_dir, 2)
    wait_for_epoch(run_dir, 2, proc)
    os.kill(json.loads((run_dir / "engine.json").read_text())["pid"], signal.SIGTERM)
    assert proc.wait(timeout=HANG_S) == 130
    out = fairtui_cmd("resume", "two", home=home)
    assert out.returncode == 0, out.stderr
    assert events_of(run_dir, "run_resumed")[-1]["distributed"]["world_size"] == 2
    assert events_of(run_dir, "run_finished")[-1]["status"] == "completed"
    assert max_weight_difference(run_dir, reference) == 0.0
    # fewer GPUs than the run trained on: refused, unless --nproc says so (and is warned of)
    with pytest.raises(ValueError, match="trained on 2 processes and --gpus names 1"):
        resume_world_size(run_dir, GpuChoice(devices=(0,)), None)
    assert resume_world_size(run_dir, GpuChoice(devices=(0,)), 1) == 1
    assert resume_world_size(run_dir, None, None) == 2
