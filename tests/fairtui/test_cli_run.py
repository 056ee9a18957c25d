"""`fairtui run` / `resume` headless: run folder contract, --json, exit codes, --gpus."""

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import HANG_S, ROOT, engine_env, fairtui_cmd, set_epochs


def test_run_json_prints_one_document_and_fills_the_run_folder(tmp_path, tiny_profile):
    home = tmp_path / "home"
    proc = fairtui_cmd("run", str(tiny_profile()), "--json", "--name", "t1", "--tag", "a", home=home)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one JSON document on stdout
    assert doc["status"] == "completed" and doc["name"] == "t1" and doc["exit_code"] == 0
    assert len(doc["class_names"]) == 10
    assert {(r["checkpoint"], r["attack"]) for r in doc["results"]} == {("last", "pgd5"), ("best", "pgd5")}
    run_dir = home / "runs" / doc["run_id"]
    for name in ("profile.toml", "events.jsonl", "engine.log", "meta.json", "checkpoints/last.pt",
                 "checkpoints/best.pt"):
        assert (run_dir / name).exists(), name
    assert json.loads((run_dir / "meta.json").read_text())["tags"] == ["a"]


def test_run_prints_a_per_class_table(tmp_path, tiny_profile):
    proc = fairtui_cmd("run", str(tiny_profile()), home=tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    assert "robust pgd5" in proc.stdout and "worst class" in proc.stdout
    assert "epoch   2/2" in proc.stderr


def test_a_run_log_sent_to_a_file_keeps_whole_epoch_lines(tmp_path, tiny_profile):
    """`nohup fairtui run ... > run.log`: nothing wraps, so `grep epoch run.log` finds whole lines (#56 item 8).
    COLUMNS=40 makes the console narrower than the epoch line, as 80 columns are for CIFAR-10's class names."""
    proc = fairtui_cmd("run", str(tiny_profile()), home=tmp_path / "home", env_extra={"COLUMNS": "40"})
    assert proc.returncode == 0, proc.stderr
    epochs = [line for line in proc.stderr.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 2 and all(line.rstrip().endswith(("s", "s *")) and " lr " in line for line in epochs)
    assert any(line.startswith("each epoch: ") and line.endswith("* new best") for line in proc.stderr.splitlines())


def test_bad_profile_exits_2_and_creates_nothing(tmp_path, tiny_profile):
    home = tmp_path / "home"
    proc = fairtui_cmd("run", str(tiny_profile()), "--set", "attack.eps=-1", home=home)
    assert proc.returncode == 2
    assert "--set: attack.eps: must be greater than 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (home / "runs").exists()
    missing = fairtui_cmd("run", str(tmp_path / "nope.toml"), home=home)
    assert missing.returncode == 2 and "no such profile file" in missing.stderr


def test_gpus_sets_the_engine_environment(tmp_path, tiny_profile):
    home = tmp_path / "home"
    proc = fairtui_cmd("run", str(tiny_profile()), "--gpus", "cpu", "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    run_dir = home / "runs" / json.loads(proc.stdout)["run_id"]
    started = json.loads((run_dir / "events.jsonl").read_text().splitlines()[0])
    assert started["provenance"]["cuda_visible_devices"] == ""
    assert started["config"]["train"]["device"] == "cpu"
    bad = fairtui_cmd("run", str(tiny_profile()), "--gpus", "zero", home=home)
    assert bad.returncode == 2 and "--gpus" in bad.stderr


def test_gpu_choice_environment():
    from fairtui.launch.launcher import GpuChoice

    assert GpuChoice.parse("0,2").env() == {"CUDA_VISIBLE_DEVICES": "0,2"}
    assert GpuChoice.parse("cpu").overrides() == ['train.device="cpu"']
    assert GpuChoice.parse(None) is None


def test_ctrl_c_stops_then_resume_completes(tmp_path, tiny_profile):
    home = tmp_path / "home"
    cmd = [sys.executable, "-c", "from fairtui.cli import main; main()", "run", str(tiny_profile()),
           "--set", "train.epochs=40", "--set", "data.train_per_class=60", "--home", str(home)]
    proc = subprocess.Popen(cmd, env=engine_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + HANG_S
    while time.time() < deadline:
        runs = list((home / "runs").glob("*/events.jsonl")) if (home / "runs").exists() else []
        if runs and '"epoch_end"' in runs[0].read_text():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 130, err
    assert "fairtui resume" in err
    run_id = runs[0].parent.name
    # 40 epochs, so that Ctrl-C lands mid-run on any machine; the resumed remainder is two epochs
    done = max(json.loads(line)["epoch"] for line in runs[0].read_text().splitlines() if '"epoch_end"' in line)
    set_epochs(runs[0].parent, done + 2)
    resumed = fairtui_cmd("resume", run_id[:12], "--json", home=home)
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert doc["status"] == "completed" and doc["epochs_done"] == done + 2


def test_frl_fine_tunes_an_earlier_run_named_in_init_from(tmp_path, tiny_profile):
    home = tmp_path / "home"
    base = fairtui_cmd("run", str(tiny_profile()), "--name", "pretrained", "--json", home=home)
    assert base.returncode == 0, base.stderr
    base_id = json.loads(base.stdout)["run_id"]
    frl = fairtui_cmd("run", str(tiny_profile()), "--set", "method.name=frl", "--set", "method.init_from=pretrained",
                      "--set", "train.epochs=1", "--json", home=home)
    assert frl.returncode == 0, frl.stderr
    run_dir = home / "runs" / json.loads(frl.stdout)["run_id"]
    saved = (run_dir / "profile.toml").read_text()
    assert f"{base_id}/checkpoints/best.pt" in saved  # the resolved profile names the exact weights
    # run_started records what was loaded: the run, which checkpoint and its epoch, the file's SHA-256, so that
    # `compare --against-start` pairs the fine-tune with that very checkpoint
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    init = next(e for e in events if e["type"] == "run_started")["init"]
    best_pt = home / "runs" / base_id / "checkpoints" / "best.pt"
    base_events = [json.loads(line) for line in (home / "runs" / base_id / "events.jsonl").read_text().splitlines()]
    best_epoch = next(e["epoch"] for e in base_events if e["type"] == "eval_result" and e["checkpoint"] == "best")
    assert init["run_id"] == base_id and init["checkpoint"] == "best" and init["epoch"] == best_epoch
    assert init["sha256"] == hashlib.sha256(best_pt.read_bytes()).hexdigest()
    assert Path(init["file"]) == best_pt.resolve()
    shown = fairtui_cmd("show", run_dir.name, home=home)
    assert f"fine-tuned from run {base_id}'s best checkpoint (epoch {best_epoch})" in " ".join(shown.stdout.split())
    assert json.loads(fairtui_cmd("show", run_dir.name, "--json", home=home).stdout)["init"] == init
    missing = fairtui_cmd("run", str(tiny_profile()), "--set", "method.name=frl", "--set", "method.init_from=nope",
                          home=home)
    assert missing.returncode == 2 and "method.init_from" in missing.stderr


def test_a_run_folder_is_made_whole_or_not_at_all(tmp_path, monkeypatch, tiny_profile):
    """A full disk while the profile or meta is written leaves no run (and no staging folder) behind."""
    import errno


    from engine.contract.profile_io import load_profile
    from fairtui.launch import launcher

    profile = load_profile(tiny_profile())
    calls = {"n": 0}
    real = launcher.atomic_write_text

    def full_on_meta(path, text):
        calls["n"] += 1
        if calls["n"] == 2:  # the profile is written, then the disk fills
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, text)

    monkeypatch.setattr(launcher, "atomic_write_text", full_on_meta)
    with pytest.raises(OSError):
        launcher.create_run(tmp_path / "home", profile, "tiny.toml", None, [], None)
    assert list((tmp_path / "home" / "runs").iterdir()) == []
    monkeypatch.setattr(launcher, "atomic_write_text", real)
    run = launcher.create_run(tmp_path / "home", profile, "tiny.toml", None, [], None)
    assert [p.name for p in (tmp_path / "home" / "runs").iterdir()] == [run.name]
    assert (run / "profile.toml").read_text() and (run / "meta.json").read_text()


def test_a_full_disk_is_one_line_for_every_command(monkeypatch, capsys):
    import errno


    import fairtui.cli as cli_mod

    def full():
        raise OSError(errno.ENOSPC, "No space left on device", "/home/x/.fairtui/runs.json")

    monkeypatch.setattr(cli_mod, "app", full)
    with pytest.raises(SystemExit) as exit_:
        cli_mod.main()
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("fairtui: no space left to write /home/x/.fairtui/runs.json")


def test_an_init_from_name_shared_by_several_runs_is_refused_with_their_ids(tmp_path):
    """`method.init_from = NAME` picked the newest of several runs of that name without a word: the weights
    a fine-tune starts from must be the ones meant."""
    from fairtui.runs.synthetic import make_run
    from tests.conftest import TINY

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="base", method="pgd_at")
    make_run(home, "20260101-000001-bbbbbb", name="base", method="pgd_at")
    frl = tmp_path / "frl.toml"
    frl.write_text(TINY.replace('name = "pgd_at"', 'name = "frl"\ninit_from = "base"'))
    out = fairtui_cmd("run", str(frl), home=home)
    assert out.returncode == 2, out.stderr
    assert "'base' names 2 runs (20260101-000000-aaaaaa, 20260101-000001-bbbbbb): give one by its id" in out.stderr
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["20260101-000000-aaaaaa", "20260101-000001-bbbbbb"]


@pytest.mark.parametrize("delay", [0.2, 0.8])
def test_ctrl_c_while_the_engine_starts_stops_it_before_training_with_no_traceback(tmp_path, delay):
    """#73 item 6: Ctrl-C in the first second of `fairtui run` killed the engine mid-import: a KeyboardInterrupt
    traceback in engine.log and a lost run. Now the run reads stopped ("stopped before training began"), its log
    has no traceback, and `fairtui resume` trains it to the end."""
    from tests.conftest import TINY

    profile = tmp_path / "p.toml"
    profile.write_text(TINY)
    home = tmp_path / "home"
    proc = subprocess.Popen([sys.executable, "-c", "from fairtui.cli import main; main()", "run", str(profile),
                             "--home", str(home)], env=engine_env(), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not list(home.glob("runs/*/engine.lock")):  # the engine is starting
        time.sleep(0.02)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 130, err
    (run_dir,) = (home / "runs").iterdir()
    doc = json.loads(fairtui_cmd("show", run_dir.name, "--json", home=home).stdout)
    assert doc["status"] == "stopped", doc["status"]
    assert "Traceback" not in (run_dir / "engine.log").read_text()
    resumed = fairtui_cmd("resume", run_dir.name, home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(fairtui_cmd("show", run_dir.name, "--json", home=home).stdout)["status"] == "completed"


def test_run_from_the_shell_says_when_other_runs_share_the_cpu(tmp_path):
    """#73 item 3: `fairtui run` started beside three running runs without a word."""
    from fairtui.cli.run import cpu_shared_line
    from fairtui.launch.launcher import GpuChoice, hold_engine_lock
    from fairtui.runs.synthetic import make_run

    assert cpu_shared_line(tmp_path, GpuChoice(cpu=True)) is None
    held = []
    for i in range(2):
        run_dir = make_run(tmp_path, f"20260101-00000{i}-busy0{i}", status="running")
        (run_dir / "engine.json").unlink(missing_ok=True)
        held.append(hold_engine_lock(run_dir))  # an engine at work (starting: it holds the run's lock)
    line = cpu_shared_line(tmp_path, GpuChoice(cpu=True))
    assert line.startswith("note: 2 other runs of this home train on the CPU") and "shares them" in line
    assert cpu_shared_line(tmp_path, GpuChoice(devices=(0,))) is None  # a GPU run shares no CPU cores this way
    for lock in held:
        lock.close()


def test_the_app_with_results_and_no_home_option_checks_its_folders_without_a_traceback(tmp_path):
    """Found on the new user's walk: `fairtui --results DIR` without --home (the home from $FAIRTUI_HOME) raised
    UnboundLocalError before the app opened (an `import os` under `if home:` made the name local). The folder is
    now checked the same with and without --home: a missing one is one line, exit 2."""
    import subprocess
    import sys

    from tests.conftest import ROOT, engine_env

    env = {**engine_env(), "FAIRTUI_HOME": str(tmp_path / "home")}
    for home in ([], ["--home", str(tmp_path / "home")]):
        out = subprocess.run([sys.executable, "-m", "fairtui", *home, "--results", str(tmp_path / "missing")],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        assert out.returncode == 2, out.stderr[-1500:]
        assert "Traceback" not in out.stderr and "no such folder" in out.stderr, out.stderr[-1500:]
