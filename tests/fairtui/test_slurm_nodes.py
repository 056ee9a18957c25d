"""`fairtui run --launcher slurm --nodes N`: one run across N nodes, one Slurm task per node, each
starting the engine under torchrun with a c10d rendezvous on the job's first node. Tested through
submitit's local executor (`--cluster local`), whose N tasks stand for the N nodes on this machine;
what must hold: the run trains on N ranks with rank 0 alone writing, a preempted job stops every rank
cleanly, is requeued and resumes; bad options are refused before anything is made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import HANG_S, ROOT, TINY, engine_env, fairtui_cmd, free_port, set_epochs

pytest.importorskip("submitit")


def events(run_dir: Path, kind: str | None = None) -> list[dict]:
    path = run_dir / "events.jsonl"
    out = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [e for e in out if kind is None or e["type"] == kind]


def wait(predicate, what: str, timeout: float = HANG_S) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise TimeoutError(what)


def logs(run_dir: Path) -> str:
    return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')[-4000:]}" for p in sorted(run_dir.glob("engine*.log")))


def submit(tmp_path: Path, epochs: int, *extra: str) -> tuple[Path, dict]:
    profile = tmp_path / "p.toml"
    profile.write_text(TINY.replace("epochs = 2", f"epochs = {epochs}"))
    home = tmp_path / "home"
    env = engine_env()
    # the rendezvous port submitit would draw from the job id, pinned to a free one for this machine
    env.update({"MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"})
    # files, not pipes: submitit's local controller (the "cluster") inherits them and outlives the command
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        code = subprocess.run([sys.executable, "-m", "fairtui", "run", str(profile), "--launcher", "slurm", "--cluster",
                               "local", "--nodes", "2", "--json", *extra, "--home", str(home)],
                              env=env, stdout=out, stderr=err, cwd=ROOT, timeout=HANG_S).returncode
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert "submitted to Slurm as job" in stderr and "2 nodes x 1 GPU" in stderr
    assert status(Path(doc["run_dir"])) in ("queued", "running")  # the command returned while the job runs
    return Path(doc["run_dir"]), doc


def status(run_dir: Path) -> str:
    from fairtui.runs.runfolder import RunView

    return RunView.load(run_dir).status()


def job_processes(run_dir: Path) -> list[int]:
    """Every process of this run's job (submitit's tasks, torchrun, the ranks): what Slurm signals. Only
    this job's: submitit's local executor gives each of its processes SUBMITIT_LOCAL_JOB_ID, the job id. A
    broader match (any submitit process) reached another test's job running beside this one, and its first
    task took the signal as a preemption and stopped that job's node (seen in CI)."""
    job_id = json.loads((run_dir / "meta.json").read_text())["slurm_job_id"]
    mark = f"SUBMITIT_LOCAL_JOB_ID={job_id}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in environ:
            found.append(int(proc.name))
    return found


def test_a_run_on_two_nodes_trains_on_both_and_rank_zero_alone_writes(tmp_path):
    run_dir, doc = submit(tmp_path, 2)
    wait(lambda: status(run_dir) in ("completed", "failed", "stopped"), "the job to end")
    assert status(run_dir) == "completed", logs(run_dir)
    all_events = events(run_dir)
    assert [e["seq"] for e in all_events] == list(range(len(all_events)))  # one writer
    started = events(run_dir, "run_started")
    assert len(started) == 1 and started[0]["distributed"]["world_size"] == 2
    assert started[0]["distributed"]["nodes"] == 2  # two torchrun agents, one rank each
    for epoch in events(run_dir, "epoch_end"):
        assert len(set(epoch["distributed"]["model_digest_per_rank"])) == 1
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["launcher"] == "slurm" and meta["slurm_job_id"] == doc["slurm_job_id"] and meta["nodes"] == 2
    assert meta["slurm_cluster"] == "local" and "queued" not in os.listdir(run_dir)
    assert (run_dir / "engine.node1.log").exists()  # the second node's torchrun and rank: its own file
    engine = json.loads((run_dir / "engine.json").read_text())
    assert sorted(r["rank"] for r in engine["ranks"]) == [0, 1]


def test_a_preempted_two_node_job_stops_every_rank_cleanly_is_requeued_and_resumes(tmp_path):
    run_dir, _ = submit(tmp_path, 100)  # the signal comes at epoch 2: far from the end, also on a busy machine
    wait(lambda: any(e["epoch"] >= 2 for e in events(run_dir, "epoch_end")), "epoch 2")
    # a short remainder for the requeued job: the job that runs read its profile when it started, the
    # requeued one reads this (the signal follows within milliseconds, long before epoch `last`)
    last = max(e["epoch"] for e in events(run_dir, "epoch_end")) + 4
    set_epochs(run_dir, last)
    procs = job_processes(run_dir)
    assert len(procs) >= 4, procs  # two tasks, and under each a torchrun and its rank
    for pid in procs:  # Slurm's warning before preemption reaches every process of the job
        try:
            os.kill(pid, signal.SIGUSR2)
        except ProcessLookupError:
            pass
    wait(lambda: status(run_dir) in ("completed", "failed"), "the requeued job to end", timeout=3 * HANG_S)
    assert status(run_dir) == "completed", logs(run_dir)
    kinds = [(e["type"], e.get("status")) for e in events(run_dir)]
    stopped = kinds.index(("run_finished", "stopped"))  # the engine stopped cleanly: not killed
    assert ("run_resumed", None) in kinds[stopped:]  # requeued, and continued from its checkpoint
    assert [k for k, _ in kinds].count("run_started") == 1
    assert [e["epoch"] for e in events(run_dir, "epoch_end")][-1] == last
    resumed = events(run_dir, "run_resumed")[-1]
    assert 2 <= resumed["epoch"] < last


def test_a_two_node_job_stopped_by_fairtui_stop_is_resubmitted_by_resume_and_continues(tmp_path):
    run_dir, _ = submit(tmp_path, 400)
    wait(lambda: any(e["epoch"] >= 2 for e in events(run_dir, "epoch_end")), "epoch 2")
    home = tmp_path / "home"
    out = fairtui_cmd("stop", run_dir.name, home=home)
    assert out.returncode == 0, out.stderr
    wait(lambda: status(run_dir) == "stopped", "the stop")
    stopped_at = max(e["epoch"] for e in events(run_dir, "epoch_end"))
    assert stopped_at < 400
    set_epochs(run_dir, stopped_at + 2)  # a short remainder for the resumed job
    with open(tmp_path / "resume.out", "w") as sink:  # files, not pipes (see submit)
        env = engine_env()
        env.update({"MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"})
        code = subprocess.run([sys.executable, "-m", "fairtui", "resume", run_dir.name, "--launcher", "slurm",
                               "--cluster", "local", "--nodes", "2", "--home", str(home)],
                              env=env, stdout=sink, stderr=sink, cwd=ROOT, timeout=HANG_S).returncode
    assert code == 0, (tmp_path / "resume.out").read_text()
    assert "resubmitted to Slurm as job" in (tmp_path / "resume.out").read_text()
    wait(lambda: status(run_dir) in ("completed", "failed"), "the resumed job to end")
    assert status(run_dir) == "completed", logs(run_dir)
    assert events(run_dir, "run_resumed")[-1]["epoch"] >= stopped_at - 1
    assert sorted({e["epoch"] for e in events(run_dir, "epoch_end")}) == list(range(1, stopped_at + 3))
    assert events(run_dir, "run_resumed")[-1]["distributed"]["nodes"] == 2


def test_a_sweep_child_on_two_nodes(tmp_path):
    """`fairtui sweep --launcher slurm --nodes 2`: each child of the array is a two-node job."""
    profile = tmp_path / "p.toml"
    profile.write_text(TINY + "\n[sweep.slurm]\ngpus_per_task = 1\n")  # the older key still reads
    home = tmp_path / "home"
    env = engine_env()
    env.update({"OMP_NUM_THREADS": "1"})  # the port: drawn from each child's job id, as on a cluster
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        code = subprocess.run([sys.executable, "-m", "fairtui", "sweep", str(profile), "--seeds", "1", "--launcher",
                               "slurm", "--cluster", "local", "--nodes", "2", "--json", "--home", str(home)],
                              env=env, stdout=out, stderr=err, cwd=ROOT, timeout=HANG_S).returncode
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert code == 0, stderr
    (run_id,) = json.loads(stdout)["runs"]
    run_dir = home / "runs" / run_id
    wait(lambda: status(run_dir) in ("completed", "failed", "stopped"), "the child to end")
    assert status(run_dir) == "completed", logs(run_dir)
    started = events(run_dir, "run_started")[0]["distributed"]
    assert (started["world_size"], started["nodes"]) == (2, 2)
    assert json.loads((run_dir / "meta.json").read_text())["nodes"] == 2


@pytest.mark.parametrize("args, message", [
    (["--nodes", "2"], "--nodes: only with --launcher slurm"),
    (["--gpus-per-node", "4", "--launcher", "local"], "--gpus-per-node: only with --launcher slurm"),
    (["--launcher", "slurm", "--cluster", "local", "--sbatch", "output=/etc/x"], "--sbatch: output: fairtui sets it"),
    (["--launcher", "slurm", "--cluster", "local", "--sbatch", "time=10"], "give --time instead"),
    (["--launcher", "slurm", "--gpus", "0"], "--gpus picks this machine's GPUs"),
    (["--launcher", "slurm", "--cluster", "local", "--nodes", "0"], "--nodes: 0: must be a whole number, 1 or more"),
    (["--launcher", "slurm", "--cluster", "mars"], "choose slurm, or local"),
    (["--launcher", "pbs"], "--launcher pbs: choose local or slurm"),
    (["--time", "60"], "--time: only with --launcher slurm"),
    (["--launcher", "slurm", "--cluster", "local", "--time", "0"], "--time: 0: must be a whole number"),
    (["--launcher", "slurm", "--cluster", "local", "--sbatch", "account"], "expected KEY=VALUE"),
])
def test_bad_slurm_options_are_refused_before_a_run_folder_is_made(tmp_path, args, message):
    profile = tmp_path / "p.toml"
    profile.write_text(TINY)
    home = tmp_path / "home"
    out = fairtui_cmd("run", str(profile), *args, home=home)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())
