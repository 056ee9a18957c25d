"""`fairtui judge --launcher slurm` against the real one-node Slurm of tests/slurm/cluster.sh (#87): the judgement's
runs are one job array, a Ctrl-C in the middle stops them through their run folders (each reads stopped, no job of
it is left in Slurm's queue), and the same command ends with a verdict, each seed trained once; no --partition is
given (the cluster's default). Skipped, saying how to start one, where no Slurm is up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.conftest import HANG_S, ROOT, TINY, engine_env, fairtui_cmd, sigint_as_a_terminal_gives_it
from tests.fairtui.test_slurm_real import queue_states, slurm_up, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(slurm_up() is not None, reason=str(slurm_up()))]
JOB = ("--launcher", "slurm", "--gpus-per-node", "0", "--cpus", "1", "--time", "20")


def judge_runs(home) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for meta_path in (home / "runs").glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        out.setdefault((meta["judge"]["role"], meta["judge"]["seed"]), []).append(meta)
    return out


def test_judge_on_slurm_stops_on_ctrl_c_and_the_same_command_ends_with_a_verdict(tmp_path):
    base = TINY.replace('name = "tiny"', 'name = "tinybase"').replace("threads = 1\n", "").replace(
        "epochs = 2", "epochs = 6")
    (tmp_path / "base.toml").write_text(base)
    (tmp_path / "method.toml").write_text(base.replace('name = "tinybase"', 'name = "tinytrades"')
                                          .replace('name = "pgd_at"', 'name = "trades"'))
    home = tmp_path / "home"
    args = ["judge", str(tmp_path / "method.toml"), "--baseline", str(tmp_path / "base.toml"), "--seeds", "0-2", *JOB,
            "--array-parallelism", "2"]
    proc = subprocess.Popen([sys.executable, "-c", "from fairtui.cli import main; main()", *args, "--home", str(home)],
                            env=engine_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_a_terminal_gives_it)

    def running() -> bool:
        from fairtui.runs.runfolder import RunView

        return (home / "runs").is_dir() and any(RunView.load(d).status() == "running" for d in (home / "runs").iterdir())

    wait_for(running, "a job of the judgement to run")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 130, err
    runs = judge_runs(home)
    assert len(runs) == 6 and all(len(m) == 1 for m in runs.values())
    jobs = {m[0]["slurm_job_id"] for m in runs.values()}
    assert len({j.split("_")[0] for j in jobs}) == 1  # one array
    assert all(m[0]["slurm_partition"] == "debug" for m in runs.values())  # the cluster's default, recorded
    wait_for(lambda: not any(queue_states(j) for j in jobs), "the judgement's jobs to leave Slurm's queue")
    statuses = {k: json.loads(fairtui_cmd("show", m[0]["run_id"], "--json", home=home).stdout)["status"]
                for k, m in runs.items()}
    assert "stopped" in statuses.values() and set(statuses.values()) <= {"stopped", "completed"}, statuses

    again = fairtui_cmd(*args, "--json", home=home)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert sorted(doc["seeds_landed"]) == [0, 1, 2] and doc["comparison"] is not None
    after = judge_runs(home)
    assert sorted(after) == sorted(runs) and all(len(m) == 1 for m in after.values())  # each seed trained once
    for key, (meta,) in after.items():
        stream = (home / "runs" / meta["run_id"] / "events.jsonl").read_text()
        events = [json.loads(line) for line in stream.splitlines()]
        assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed", key
        if statuses[key] == "completed":  # a landed run was not trained again
            assert not any(e["type"] == "run_resumed" for e in events), key
