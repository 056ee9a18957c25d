"""experiments/digits_fairness.py --results: every (profile, seed) the table reads has its small files copied
to RESULTS/<profile>/<run-id>/ (never a checkpoint), and the table prints those runs' numbers."""

from __future__ import annotations

import json
import sys

from experiments import digits_fairness


def fake_run(tmp_path, name: str, worst: float) -> dict:
    run_dir = tmp_path / "home" / "runs" / name
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "best.pt").write_bytes(b"weights")
    (run_dir / "events.jsonl").write_text(json.dumps({"type": "run_started", "split_sizes": {"test": [50, 52]}}) + "\n")
    (run_dir / "profile.toml").write_text('name = "digits-at"\n')
    (run_dir / "meta.json").write_text("{}")
    results = [{"attack": "pgd20", "checkpoint": ck, "avg_robust": 0.5, "worst_robust": worst, "avg_clean": 0.9}
               for ck in ("best", "last")]
    return {"run_id": name, "run_dir": str(run_dir), "results": results}


def test_results_gets_each_runs_small_files_and_the_table_its_numbers(tmp_path, monkeypatch, capsys):
    docs = {0: fake_run(tmp_path, "20260101-000000-aaaaaa", 0.25), 1: fake_run(tmp_path, "20260101-000001-bbbbbb", 0.35)}
    asked = []
    monkeypatch.setattr(digits_fairness, "run", lambda profile, seed, home, sets: asked.append(sets) or docs[seed])
    monkeypatch.setattr(sys, "argv", ["digits_fairness.py", "--seeds", "0", "1", "--profiles", "digits-at",
                                      "--home", str(tmp_path / "home"), "--results", str(tmp_path / "results"),
                                      "--set", "train.amp=bf16"])
    digits_fairness.main()
    out = capsys.readouterr().out
    for doc in docs.values():
        copied = tmp_path / "results" / "digits-at" / doc["run_id"]
        assert sorted(p.name for p in copied.iterdir()) == ["events.jsonl", "meta.json", "profile.toml"]
        assert (copied / "events.jsonl").read_text() == (tmp_path / "home" / "runs" / doc["run_id"] / "events.jsonl").read_text()
    assert asked == [["train.amp=bf16"]] * 2  # --set reaches every run
    assert "| digits-at | 25.0 | 35.0 |" in out  # each seed's worst class, best checkpoint
    assert "one image of the smallest class is 2.0 points" in out  # 50 test images, read from the run's run_started event


def test_an_override_goes_last_on_the_run_command_so_it_wins(tmp_path, monkeypatch):
    import subprocess
    from types import SimpleNamespace

    commands = []

    def fake(cmd, **kwargs):
        commands.append(cmd)
        return SimpleNamespace(returncode=0, stdout="[]" if "ls" in cmd else '{"run_id": "r"}', stderr="")

    monkeypatch.setattr(subprocess, "run", fake)
    digits_fairness.run("digits-faal", 2, tmp_path, ["train.amp=bf16", "seed=2"])
    (run,) = [c for c in commands if "run" in c]
    assert run[-4:] == ["--set", "train.amp=bf16", "--set", "seed=2"]
    assert "method.init_from=digits-at-s2" in run  # the fine-tune's own base, before the caller's overrides
