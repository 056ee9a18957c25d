"""What reaches Slurm's batch script: no Slurm value, from the command line, a profile or a sweep, may
add a line (and so a command) to it; a control character or a name sbatch would not take is refused
with one line and exit 2 before anything is created."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from engine.contract.profile_schema import ProfileError
from tests.conftest import TINY, fairtui_cmd

pytest.importorskip("submitit")

from fairtui.launch.slurm import SlurmSettings, _executor  # noqa: E402

INJECTIONS = ["gpu\ntouch injected #", "gpu\rtouch injected", "gpu\x00", "a\x1bb"]


def batch_script(tmp_path: Path, monkeypatch, settings: SlurmSettings) -> str:
    """The script submitit would hand to sbatch for a run with these settings (a fake srun on PATH, so that
    submitit's Slurm executor can be built on a machine without Slurm)."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "srun").write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/srun-called\"\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    executor = _executor(tmp_path / "home", "run1", settings, array=False)
    return executor._executor._make_submission_file_text("python -m engine train RUN", "uid")


# Values sbatch takes whose characters mean something to a shell: each stays inside its own #SBATCH line.
HOSTILE_BUT_LEGAL = {"comment": "a b 'c' $(touch injected); `touch injected` # x", "licenses": "x;touch injected",
                     "mail-user": "me@example.org", "constraint": "a100&(ib|eth)"}


def test_no_legal_value_adds_a_line_and_the_script_runs_no_injected_command(tmp_path, monkeypatch):
    plain = batch_script(tmp_path, monkeypatch, SlurmSettings.from_sources({}, partition="gpu", cluster="slurm"))
    settings = SlurmSettings.from_sources({"sbatch": dict(HOSTILE_BUT_LEGAL)}, partition="gpu,debug", cluster="slurm")
    script = batch_script(tmp_path, monkeypatch, settings)
    lines = script.splitlines()
    assert len(lines) == len(plain.splitlines()) + len(HOSTILE_BUT_LEGAL)  # one line per option, no more
    for key in HOSTILE_BUT_LEGAL:
        (line,) = [ln for ln in lines if f"--{key}=" in ln]
        assert line.startswith("#SBATCH ")
    # Run the script as sbatch would start it: only the fake srun runs, nothing touches a file.
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(script)
    done = subprocess.run(["bash", "job.sh"], cwd=work, capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "bin" / "srun-called").exists()
    assert not (work / "injected").exists() and not (tmp_path / "injected").exists()


@pytest.mark.parametrize("value", INJECTIONS)
@pytest.mark.parametrize("source", ["cli partition", "profile partition", "profile sbatch", "cli sbatch"])
def test_a_control_character_in_any_slurm_value_is_refused(source, value):
    table, cli = {}, {"partition": "gpu", "cluster": "slurm"}
    if source == "cli partition":
        cli["partition"] = value
    elif source == "profile partition":
        table["partition"], cli["partition"] = value, None
    elif source == "profile sbatch":
        table["sbatch"] = {"comment": value}
    else:
        cli["sbatch"] = [f"comment={value}"]
    with pytest.raises(ProfileError, match="control character") as err:
        SlurmSettings.from_sources(table, **cli)
    assert "\n" not in str(err.value) and "\r" not in str(err.value)  # one line, the value escaped


@pytest.mark.parametrize("table, cli, message", [
    ({}, {"partition": "gpu debug"}, "is not a Slurm partition"),
    ({"sbatch": {"account": "me; touch x"}}, {}, "is not a Slurm account"),
    ({"sbatch": {"qos": "high$(id)"}}, {}, "is not a Slurm qos"),
    ({"sbatch": {"time": "1 day"}}, {}, "time: fairtui sets it itself: give --time instead"),
    ({"sbatch": {"reservation": "a b"}}, {}, "is not a Slurm reservation"),
    ({"sbatch": {"output": "/etc/passwd"}}, {}, "output: fairtui sets it itself"),  # #87: its log is fairtui's
    ({}, {"sbatch": ["error=/tmp/x"]}, "error: fairtui sets it itself"),
    ({}, {"sbatch": ["J=name"]}, "J: fairtui sets it itself"),
    ({"sbatch": {"x\ny": "1"}}, {}, "is not an sbatch option name"),
    ({}, {"sbatch": ["--wrap=touch x"]}, "is not an sbatch option name"),
    ({"sbatch": {"nice": [1]}}, {}, "expected a string or a number"),
])
def test_values_sbatch_would_not_take_are_refused(table, cli, message):
    cli = {"partition": "gpu", "cluster": "slurm", **cli}
    with pytest.raises(ProfileError, match=message):
        SlurmSettings.from_sources(table, **cli)


def test_legal_values_pass_unchanged():
    settings = SlurmSettings.from_sources({"sbatch": {"account": "proj-1.a", "qos": "high,low", "reservation": "r1",
                                                      "nice": 10}}, partition="gpu,debug", cluster="slurm")
    assert settings.sbatch == {"account": "proj-1.a", "qos": "high,low", "reservation": "r1", "nice": "10"}


def test_run_and_sweep_refuse_an_injected_partition_before_anything_exists(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text(TINY)
    home = tmp_path / "home"
    out = fairtui_cmd("run", str(profile), "--launcher", "slurm", "--cluster", "local", "--partition",
                      "gpu\ntouch injected #", home=home)
    assert out.returncode == 2 and "control character" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    swept = tmp_path / "s.toml"
    swept.write_text(TINY + '\n[sweep]\nseeds = [0, 1]\nlauncher = "slurm"\n[sweep.slurm]\ncluster = "local"\n'
                     'partition = "gpu"\n[sweep.slurm.sbatch]\ncomment = "x\\ntouch injected"\n')
    out = fairtui_cmd("sweep", str(swept), home=home)
    assert out.returncode == 2 and "sweep.slurm.sbatch.comment" in out.stderr and "control character" in out.stderr, \
        out.stderr
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())
    assert not (home / "slurm").exists()


def test_a_job_sbatch_refuses_leaves_a_failed_run_with_the_reason_and_the_stream_to_the_engine(tmp_path):
    """sbatch refuses the job (a fake sbatch on PATH): `run` exits 2 with the reason, and the run reads as failed
    with it everywhere (`show`, `ls`), recorded beside the event stream, which only the engine writes."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: nowhere' >&2\nexit 1\n")
    (fake / "sbatch").chmod(0o755)
    (fake / "srun").write_text("#!/bin/sh\nexit 0\n")
    (fake / "srun").chmod(0o755)
    profile = tmp_path / "p.toml"
    profile.write_text(TINY)
    home = tmp_path / "home"
    env_path = f"{fake}:{__import__('os').environ['PATH']}"
    out = fairtui_cmd("run", str(profile), "--launcher", "slurm", "--partition", "nowhere", "--name", "refused",
                      home=home, env_extra={"PATH": env_path})
    assert out.returncode == 2 and "not submitted" in out.stderr, out.stderr
    (run_dir,) = (home / "runs").iterdir()
    assert not (run_dir / "queued").exists()
    assert not (run_dir / "events.jsonl").exists() or '"run_finished"' not in (run_dir / "events.jsonl").read_text()
    import json

    shown = json.loads(fairtui_cmd("show", "refused", "--json", home=home).stdout)
    assert shown["status"] == "failed" and "not submitted to Slurm" in shown["error"], shown
    listed = json.loads(fairtui_cmd("ls", "--json", home=home).stdout)
    assert [r["status"] for r in listed] == ["failed"]


def test_a_jobs_run_reads_queued_then_running_never_lost_while_its_engine_starts(tmp_path, monkeypatch):
    """The job's task hands engine.lock to the engine it starts (as the local launcher does) and only then
    drops the `queued` marker: a reader polling the run while the engine imports torch never sees "lost"
    (it did for the seconds between the two, and `fairtui tune --launcher slurm` recorded such trials as
    lost)."""
    import threading

    from fairtui.runs.runfolder import RunView
    from fairtui.launch.slurm import TrainRun
    from tests.conftest import TINY, engine_env, make_run_dir

    for key, value in engine_env().items():
        monkeypatch.setenv(key, value)
    profile = tmp_path / "p.toml"
    profile.write_text(TINY.replace("epochs = 2", "epochs = 1"))
    run_dir = make_run_dir(tmp_path, profile)
    (run_dir / "meta.json").write_text(json.dumps({"run_id": run_dir.name, "name": "run", "tags": []}))
    (run_dir / "queued").touch()
    seen: list[str] = []
    task = threading.Thread(target=TrainRun(str(run_dir)))
    task.start()
    while task.is_alive():
        status = RunView.load(run_dir).status()
        if not seen or seen[-1] != status:
            seen.append(status)
        time.sleep(0.02)
    task.join()
    seen.append(RunView.load(run_dir).status())
    assert "lost" not in seen and seen[-1] == "completed", seen
    assert "running" in seen
