"""The CIFAR-10 table's script, end to end on a tiny CIFAR-format folder through fairtui itself."""

import json
import subprocess
import sys

from tests.conftest import ROOT, engine_env
from tests.engine.test_data import write_cifar

TINY = ["--set", "data.val_per_class=2", "--set", "data.batch_size=16", "--set", "model.arch=small_cnn",
        "--set", "train.epochs=1", "--set", "train.milestones=[]", "--set", "attack.steps=1",
        "--set", "eval.val_attack=pgd1", "--set", "train.device=cpu"]


def script(tmp_path, *extra):
    cmd = [sys.executable, str(ROOT / "experiments" / "cifar10_fairness.py"), "--data-root", str(tmp_path / "data"),
           "--home", str(tmp_path / "home"), "--methods", "at", "frl", "--aa-per-class", "1", *TINY, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=engine_env(), timeout=600)


def test_the_script_trains_fine_tunes_evaluates_and_is_idempotent(tmp_path):
    write_cifar(tmp_path / "data", n_train=100, n_test=20)
    first = script(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in first.stdout.splitlines() if line.startswith("| ")}
    assert {"PGD-AT", "FRL (RW+RM, from PGD-AT)"} <= set(rows)
    assert "PGD-20 on the whole test split, 20 images" in first.stdout
    for row in ("PGD-AT", "FRL (RW+RM, from PGD-AT)"):
        cells = [c.strip() for c in rows[row].split("|")[1:-1]]
        assert all(c != "-" for c in cells[2:9]), rows[row]  # clean, PGD-20 and AA numbers are all there
        assert cells[11] == "cpu"

    home = tmp_path / "home"
    listed = json.loads(subprocess.run([sys.executable, "-m", "fairtui.cli", "ls", "--json", "--home", str(home)],
                                       capture_output=True, text=True, cwd=ROOT, env=engine_env()).stdout)
    assert sorted(r["name"] for r in listed) == ["cifar10-short-at-s0", "cifar10-short-frl-s0"]
    frl = next(r for r in listed if r["name"] == "cifar10-short-frl-s0")
    at = next(r for r in listed if r["name"] == "cifar10-short-at-s0")
    profile = (home / "runs" / frl["run_id"] / "profile.toml").read_text()
    assert at["run_id"] in profile and "pretrain_epochs = 0" in profile  # FRL fine-tuned the table's AT run
    # AutoAttack is an exploratory result (a subset): never the run's headline number
    shown = json.loads(subprocess.run([sys.executable, "-m", "fairtui.cli", "show", at["run_id"], "--json", "--home",
                                       str(home)], capture_output=True, text=True, cwd=ROOT, env=engine_env()).stdout)
    assert [r["attack"] for r in shown["other_results"]] == ["aa"] and "aa" not in [r["attack"] for r in shown["results"]]

    again = script(tmp_path)  # a second call reuses every finished run and stored result
    assert again.returncode == 0, again.stderr[-3000:]
    assert "training" not in again.stderr and again.stdout == first.stdout
