"""The Slurm launcher against a real Slurm (#74): the one-node cluster of tests/slurm/cluster.sh (Debian's slurm-wlm
and munge; `.ci/run` starts it), driven through fairtui's own commands with tiny digits profiles. Where no Slurm is
up (a laptop), every test here is skipped with one line saying how to start one; none passes without it.

What runs: a job fairtui writes is accepted by sbatch and trains; a sweep is one array whose cap holds (read from
squeue while it runs); `fairtui stop` cancels the job and the run is stopped with its work kept, `fairtui resume`
submits again and ends at an unstopped run's numbers; `scontrol requeue` stops the engine cleanly and the requeued
job resumes to the same numbers; a job the scheduler refuses leaves a failed run with the scheduler's reason."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.contract.protocol import STOP_MARKER
from fairtui.launch.control import engine_processes
from tests.conftest import HANG_S, ROOT, TINY, engine_env, fairtui_cmd, send_signal


def slurm_up() -> str | None:
    """None when a Slurm controller answers with an idle or allocated node, else why not."""
    if not shutil.which("sinfo") or not shutil.which("sbatch"):
        return "no Slurm on PATH: `bash tests/slurm/cluster.sh start` starts a one-node cluster (Debian, root)"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "sinfo did not answer: `bash tests/slurm/cluster.sh start`"
    if out.returncode or not {"idle", "mixed", "allocated"} & set(out.stdout.split()):
        return "no Slurm node is up: `bash tests/slurm/cluster.sh start`"
    return None


pytestmark = [pytest.mark.slurm, pytest.mark.skipif(slurm_up() is not None, reason=str(slurm_up()))]
JOB = ("--launcher", "slurm", "--partition", "debug", "--gpus-per-node", "0", "--cpus", "1", "--time", "20")


def profile(tmp_path: Path, epochs: int = 2, name: str = "tiny") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(TINY.replace("epochs = 2", f"epochs = {epochs}").replace('name = "tiny"', f'name = "{name}"'))
    return path


def show(home: Path, run: str) -> dict:
    return json.loads(fairtui_cmd("show", run, "--json", home=home).stdout)


def wait_for(check, what: str, timeout: float = HANG_S, poll: float = 0.5) -> None:
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)


def _epochs(run_dir: Path) -> int:
    """The epochs the run's events record, read from the folder (no command's start-up in the way)."""
    try:
        return (run_dir / "events.jsonl").read_text().count('"type":"epoch_end"')
    except OSError:
        return 0


def queue_states(job: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
    return out.stdout.split()


def test_slurm_is_real():
    """What the other tests run against: Slurm's own version, as the docs quote it."""
    version = subprocess.run(["sinfo", "-V"], capture_output=True, text=True, timeout=30).stdout
    assert version.startswith("slurm")


def test_a_run_submitted_to_slurm_trains_and_streams_back(tmp_path):
    home = tmp_path / "home"
    out = fairtui_cmd("run", str(profile(tmp_path)), *JOB, "--name", "on-slurm", home=home)
    assert out.returncode == 0, out.stderr
    assert "submitted to Slurm as job" in out.stderr
    wait_for(lambda: show(home, "on-slurm")["status"] == "completed", "the Slurm job's run to complete")
    doc = show(home, "on-slurm")
    run_dir = home / "runs" / doc["run_id"]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["launcher"] == "slurm" and meta["slurm_job_id"].isdigit() and meta["slurm_cluster"] == "slurm"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in events if e["type"] == "epoch_end"] == [1, 2]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"
    assert (run_dir / "engine.log").read_text()  # the engine's log, written by the job


def test_without_a_partition_the_job_takes_the_clusters_default_and_the_run_says_which(tmp_path):
    """#87: sbatch's own rule (the default partition, `debug*` here) where no --partition is given; meta.json
    records the partition the job got."""
    home = tmp_path / "home"
    job = [a for a in JOB if a not in ("--partition", "debug")]
    out = fairtui_cmd("run", str(profile(tmp_path)), *job, "--name", "default-partition", home=home)
    assert out.returncode == 0, out.stderr
    run_dir = home / "runs" / show(home, "default-partition")["run_id"]
    assert json.loads((run_dir / "meta.json").read_text())["slurm_partition"] == "debug"
    wait_for(lambda: show(home, "default-partition")["status"] == "completed", "the job to complete")


def test_a_sweep_is_one_array_whose_cap_holds(tmp_path):
    """Four children, at most two at once: the node has CPUs for eight one-CPU jobs, so the cap is the limit."""
    home = tmp_path / "home"
    out = fairtui_cmd("sweep", str(profile(tmp_path, epochs=3)), "--seeds", "4", *JOB, "--array-parallelism", "2",
                      "--json", home=home)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    record = json.loads(next((home / "sweeps").glob("*.json")).read_text())
    arrays = {j.split("_")[0] for j in record["jobs"]}
    assert len(record["jobs"]) == 4 and len(arrays) == 1  # one array of four tasks
    array = arrays.pop()
    most = 0
    deadline = time.time() + HANG_S
    while time.time() < deadline:
        states = queue_states(array)
        most = max(most, states.count("RUNNING"))
        if not states:
            break
        time.sleep(0.3)
    assert 1 <= most <= 2
    statuses = [show(home, r)["status"] for r in doc["runs"]]
    assert statuses == ["completed"] * 4


def test_stop_cancels_the_job_and_resume_ends_at_an_unstopped_runs_numbers(tmp_path):
    home = tmp_path / "home"
    path = profile(tmp_path, epochs=12)
    out = fairtui_cmd("run", str(path), *JOB, "--name", "stopped", home=home)
    assert out.returncode == 0, out.stderr
    run_dir = home / "runs" / show(home, "stopped")["run_id"]
    wait_for(lambda: _epochs(run_dir) >= 2, "two epochs on Slurm", poll=0.02)
    pids = engine_processes(run_dir)[1]  # held between epochs while the stop is asked: a fast CPU cannot finish first
    held = [pid for pid in pids if send_signal(pid, signal.SIGSTOP)]
    assert held, f"no engine process to hold ({pids})"
    stop = subprocess.Popen([sys.executable, "-c", "from fairtui.cli import main; main()", "stop", "stopped", "--home",
                             str(home)], env=engine_env(), cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    wait_for(lambda: (run_dir / STOP_MARKER).exists() or stop.poll() is not None, "the stop to be asked")
    for pid in held:
        send_signal(pid, signal.SIGCONT)
    _, err = stop.communicate(timeout=HANG_S)  # asked through the run folder: the engine stops after its batch
    assert stop.returncode == 0, err
    assert show(home, "stopped")["status"] == "stopped"
    kept = show(home, "stopped")["epochs_done"]
    assert 2 <= kept < 12
    job = json.loads((home / "runs" / show(home, "stopped")["run_id"] / "meta.json").read_text())["slurm_job_id"]
    wait_for(lambda: not queue_states(job), "the stopped run's job to end")
    again = fairtui_cmd("resume", "stopped", *JOB, home=home)
    assert again.returncode == 0, again.stderr
    wait_for(lambda: show(home, "stopped")["status"] == "completed", "the resumed job to complete")
    local = fairtui_cmd("run", str(path), "--name", "unstopped", "--gpus", "cpu", home=home)
    assert local.returncode == 0, local.stderr
    assert results(home, "stopped") == results(home, "unstopped")


def test_a_requeued_job_resumes_to_the_same_numbers(tmp_path):
    """`scontrol requeue` ends the job as a cancellation does: on Slurm 22.05 with proctrack/linuxproc the job step,
    the engine with it, is killed at once (no clean stop), and the requeued job resumes from the last checkpoint and
    the partial epoch: the same numbers as an unstopped run."""
    home = tmp_path / "home"
    path = profile(tmp_path, epochs=12)
    out = fairtui_cmd("run", str(path), *JOB, "--name", "requeued", home=home)
    assert out.returncode == 0, out.stderr
    run_dir = home / "runs" / show(home, "requeued")["run_id"]
    wait_for(lambda: _epochs(run_dir) >= 2, "two epochs on Slurm", poll=0.02)
    held = [pid for pid in engine_processes(run_dir)[1] if send_signal(pid, signal.SIGSTOP)]  # cannot finish first
    job = json.loads((run_dir / "meta.json").read_text())["slurm_job_id"]
    requeue = subprocess.run(["scontrol", "requeue", job], timeout=30).returncode
    for pid in held:  # killed with its job step, or on to its end if the requeue was refused
        send_signal(pid, signal.SIGCONT)
    assert requeue == 0
    wait_for(lambda: show(home, "requeued")["status"] == "completed", "the requeued job to resume and complete")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["type"] == "run_resumed" for e in events)  # it continued from its checkpoint
    assert [e["status"] for e in events if e["type"] == "run_finished"][-1] == "completed"
    local = fairtui_cmd("run", str(path), "--name", "unrequeued", "--gpus", "cpu", home=home)
    assert local.returncode == 0, local.stderr
    assert results(home, "requeued") == results(home, "unrequeued")


@pytest.mark.parametrize("option, value, said", [("--partition", "nowhere", "invalid partition"),
                                                 ("--cpus", "64", "more processors requested than permitted")])
def test_a_job_the_scheduler_refuses_leaves_a_failed_run_with_its_reason(tmp_path, option, value, said):
    home = tmp_path / "home"
    args = list(JOB)
    args[args.index(option) + 1] = value
    out = fairtui_cmd("run", str(profile(tmp_path)), *args, "--name", "refused", home=home)
    assert out.returncode == 2 and said in out.stderr.lower(), out.stderr
    doc = show(home, "refused")
    assert doc["status"] == "failed" and said in (doc.get("error") or "").lower(), doc


def results(home: Path, run: str) -> list:
    """The run's test results, each checkpoint's per-class numbers."""
    run_dir = home / "runs" / show(home, run)["run_id"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return sorted((e["checkpoint"], e["attack"], e["robust_acc_per_class"], e["clean_acc_per_class"])
                  for e in events if e["type"] == "eval_result")


