"""The CIFAR-10 table's script, end to end on a tiny CIFAR-format folder through fairtui itself."""

import json
import time
import subprocess
import sys

from tests.conftest import ROOT, engine_env
from tests.engine.test_data import write_cifar

TINY = ["--set", "data.val_per_class=2", "--set", "data.batch_size=16", "--set", "model.arch=small_cnn",
        "--set", "train.epochs=1", "--set", "train.milestones=[]", "--set", "attack.steps=1",
        "--set", "eval.val_attack=pgd1", "--set", "train.device=cpu"]


def script(tmp_path, *extra):
    cmd = [sys.executable, str(ROOT / "experiments" / "cifar10_fairness.py"), "--scale", "short", "--data-root",
           str(tmp_path / "data"), "--home", str(tmp_path / "home"), "--results", str(tmp_path / "results"),
           "--methods", "at", "frl", "--seeds", "0", "--aa-per-class", "1", *TINY, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=engine_env(), timeout=600)


def rows_of(stdout: str) -> dict[str, list[str]]:
    """The headline table's rows by (method, checkpoint)."""
    out = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 10 and cells[3] in ("best", "last"):
            out[(cells[0], cells[3])] = cells
    return out


def test_the_script_trains_fine_tunes_collects_and_is_idempotent(tmp_path):
    write_cifar(tmp_path / "data", n_train=100, n_test=20)
    first = script(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = rows_of(first.stdout)
    assert {("PGD-AT", "best"), ("FRL (RW+RM, from PGD-AT)", "best")} <= set(rows)
    assert "PGD-20 at eps 8/255 on the whole test split (20 images)" in first.stdout
    for cells in rows.values():
        assert all(c != "-" for c in cells[4:8]), cells  # clean, PGD-20 avg and worst, CV are all there

    home = tmp_path / "home"
    listed = json.loads(subprocess.run([sys.executable, "-m", "fairtui.cli", "ls", "--json", "--home", str(home)],
                                       capture_output=True, text=True, cwd=ROOT, env=engine_env()).stdout)
    assert sorted(r["name"] for r in listed) == ["cifar10-short-at-s0", "cifar10-short-frl-s0"]
    frl = next(r for r in listed if r["name"] == "cifar10-short-frl-s0")
    at = next(r for r in listed if r["name"] == "cifar10-short-at-s0")
    profile = (home / "runs" / frl["run_id"] / "profile.toml").read_text()
    assert at["run_id"] in profile and "pretrain_epochs = 0" in profile  # FRL fine-tuned the table's AT run
    # Each finished run's small files, and nothing else, were collected under <results>/<profile>/<run-id>/
    for run in (at, frl):
        collected = tmp_path / "results" / f"cifar10-short-{run['name'].split('-')[2]}" / run["run_id"]
        assert sorted(p.name for p in collected.iterdir()) == ["events.jsonl", "meta.json", "profile.toml"]
        assert (collected / "events.jsonl").read_bytes() == (home / "runs" / run["run_id"] / "events.jsonl").read_bytes()
    # AutoAttack is an exploratory result (a subset): never the run's headline number, shown apart
    shown = json.loads(subprocess.run([sys.executable, "-m", "fairtui.cli", "show", at["run_id"], "--json", "--home",
                                       str(home)], capture_output=True, text=True, cwd=ROOT, env=engine_env()).stdout)
    assert [r["attack"] for r in shown["other_results"]] == ["aa"] and "aa" not in [r["attack"] for r in shown["results"]]
    assert "Exploratory, not headline: AutoAttack" in first.stdout and "| PGD-AT | aa | best | 1 per class |" in first.stdout

    again = script(tmp_path)  # a second call reuses every finished run and stored result
    assert again.returncode == 0, again.stderr[-3000:]
    assert "training" not in again.stderr and again.stdout == first.stdout

    # A new home (the old one lost): a seed already collected is not trained again...
    renewed = script(tmp_path, "--home", str(tmp_path / "home2"), "--methods", "at", "--aa-per-class", "0")
    assert renewed.returncode == 0, renewed.stderr[-3000:]
    assert "seed 0 is collected already" in renewed.stderr and "training" not in renewed.stderr
    assert not (tmp_path / "results-bases").exists()
    # ... unless a fine-tune still to be collected needs it as its base: then it is trained again, and not added
    # to the table twice
    import shutil

    shutil.rmtree(tmp_path / "results" / "cifar10-short-frl")
    renewed = script(tmp_path, "--home", str(tmp_path / "home2"), "--aa-per-class", "0")
    assert renewed.returncode == 0, renewed.stderr[-3000:]
    assert "training cifar10-short-at-s0" in renewed.stderr and "training cifar10-short-frl-s0" in renewed.stderr
    assert len(list((tmp_path / "results" / "cifar10-short-at").iterdir())) == 1
    # ... it is kept beside the table, so that a fine-tune of it can be read against it
    retrained = list((tmp_path / "results-bases" / "cifar10-short-at").iterdir())
    assert len(retrained) == 1 and retrained[0].name != at["run_id"]
    assert sorted(p.name for p in retrained[0].iterdir()) == ["events.jsonl", "meta.json", "profile.toml"]

    table_only = subprocess.run([sys.executable, str(ROOT / "experiments" / "cifar10_fairness.py"), "--scale", "short",
                                 "--table-only", "--results", str(tmp_path / "results")],
                                capture_output=True, text=True, cwd=ROOT, env=engine_env(), timeout=120)
    assert table_only.returncode == 0 and table_only.stdout == renewed.stdout  # from the collected files alone


def test_download_fetches_once_and_says_what_to_do_without_the_network(tmp_path, monkeypatch):
    """`--download`: a folder that holds CIFAR-10 already is used as it is (torchvision is not asked); where the
    download fails (no network), one message says where to put the data instead."""
    import pytest
    import torchvision

    sys.path.insert(0, str(ROOT / "experiments"))
    import cifar10_fairness

    asked = []

    def refuse(root, download):
        asked.append(root)
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", refuse)
    write_cifar(tmp_path / "data", n_train=10, n_test=10)
    cifar10_fairness.download(str(tmp_path / "data"))
    assert asked == []
    with pytest.raises(SystemExit) as raised:
        cifar10_fairness.download(str(tmp_path / "empty"))
    assert asked == [str(tmp_path / "empty")]
    assert "could not download CIFAR-10" in str(raised.value) and "cifar-10-batches-py/" in str(raised.value)


def test_a_training_says_its_progress_when_it_moves_on(tmp_path, capsys):
    """A CPU-scale run is 15 to 45 minutes: the script says each new epoch or phase of the run it waits for, once."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import argparse

    import cifar10_fairness

    table = cifar10_fairness.Table(argparse.Namespace(home=tmp_path, scale="cpu", results=None, threads=1))
    run = tmp_path / "runs" / "20261127-000000-aaaaaa"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"name": "cifar10-cpu-at-s0"}))
    (run / "events.jsonl").write_text(json.dumps({"type": "run_started", "t": time.time() - 11 * 60}) + "\n")
    watch = cifar10_fairness.Watch(table, "cifar10-cpu-at-s0")
    watch()  # no progress yet: nothing said
    for epoch, batch in ((1, 10), (1, 200), (2, 5)):
        (run / "progress.json").write_text(json.dumps({"phase": "train", "epoch": epoch, "batch": batch,
                                                       "batches": 313, "started": 0}))
        watch()
    said = [line.split(" ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert [line.split(" (")[0] for line in said] == ["cifar10-cpu-at-s0: train epoch 1",
                                                      "cifar10-cpu-at-s0: train epoch 2"]
    assert said[-1].endswith("(batch 5 of 313), 11 min in")  # the run's time, not its phase's
