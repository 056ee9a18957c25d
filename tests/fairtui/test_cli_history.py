"""ls, show, compare, export, tag, note, rm, stop on synthetic and real run folders."""

import json
import statistics

import pytest

from engine.config import Profile, TrainConfig
from fairtui.synthetic import make_run
from tests.conftest import fairtui_cmd


@pytest.fixture
def home(tmp_path):
    make_run(tmp_path, "20260101-000000-aaaaaa", name="base", method="pgd_at", robust_centre=0.4, tags=("t1",))
    make_run(tmp_path, "20260101-000001-bbbbbb", name="fair", method="cfa", robust_centre=0.5)
    make_run(tmp_path, "20260101-000002-cccccc", name="broken", status="failed")
    return tmp_path


def cli(*args, home):
    return fairtui_cmd(*args, home=home, timeout=60, env_extra={"COLUMNS": "200"})


def test_ls_json_filters_and_newest_first(home):
    out = cli("ls", "--json", home=home)
    assert out.returncode == 0, out.stderr
    docs = json.loads(out.stdout)
    assert [d["name"] for d in docs] == ["broken", "fair", "base"]
    assert [d["name"] for d in json.loads(cli("ls", "--json", "--status", "failed", home=home).stdout)] == ["broken"]
    assert [d["name"] for d in json.loads(cli("ls", "--json", "--tag", "t1", home=home).stdout)] == ["base"]
    assert [d["name"] for d in json.loads(cli("ls", "--json", "--name", "f*", home=home).stdout)] == ["fair"]
    assert "base" in cli("ls", home=home).stdout


def test_run_references_unknown_and_ambiguous(home):
    assert json.loads(cli("show", "fair", "--json", home=home).stdout)["run_id"] == "20260101-000001-bbbbbb"
    assert json.loads(cli("show", "20260101-000000", "--json", home=home).stdout)["name"] == "base"
    unknown = cli("show", "fiar", home=home)
    assert unknown.returncode == 2 and "did you mean fair" in unknown.stderr
    ambiguous = cli("show", "20260101", home=home)
    assert ambiguous.returncode == 2 and "ambiguous" in ambiguous.stderr and "aaaaaa" in ambiguous.stderr


def test_compare_deltas_and_rho_by_hand(home):
    out = cli("compare", "base", "fair", "--json", home=home)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    runs = {r["name"]: r for r in doc["runs"]}
    b, f = runs["base"], runs["fair"]
    avg_b, avg_f = statistics.mean(b["robust_acc_per_class"]), statistics.mean(f["robust_acc_per_class"])
    worst_b, worst_f = min(b["robust_acc_per_class"]), min(f["robust_acc_per_class"])
    assert f["delta_vs_baseline"]["avg_robust"] == pytest.approx(avg_f - avg_b)
    assert f["delta_vs_baseline"]["worst_robust"] == pytest.approx(worst_f - worst_b)
    assert f["rho"] == pytest.approx((worst_f - worst_b) / worst_b - (avg_b - avg_f) / avg_b)
    assert f["worst_class"] == f["robust_acc_per_class"].index(worst_f)
    assert doc["config_diff"]["method.name"] == ["pgd_at", "cfa"]
    assert "name" in doc["config_diff"] and "train.epochs" not in doc["config_diff"]
    human = cli("compare", "base", "fair", home=home)
    assert "rho" in human.stdout and "(base)" in human.stdout


def test_compare_errors_say_what_exists(home):
    missing = cli("compare", "base", "fair", "--attack", "aa", home=home)
    assert missing.returncode == 2 and "has no aa result" in missing.stderr and "best/pgd20" in missing.stderr
    assert cli("compare", "base", home=home).returncode == 2
    failed = cli("compare", "base", "broken", home=home)
    assert failed.returncode == 2 and "no test result" in failed.stderr


def test_export_groups_seeds_as_mean_and_std(tmp_path):
    for seed in (0, 1, 2):
        make_run(tmp_path, f"2026010{seed}-000000-s{seed}", name=f"cfa-s{seed}", seed=seed,
                 profile=Profile(name="cfa", seed=seed))
    make_run(tmp_path, "20260109-000000-other", name="other", profile=Profile(name="other",
                                                                              train=TrainConfig(epochs=3)))
    runs = [f"2026010{s}-000000-s{s}" for s in (0, 1, 2)] + ["20260109-000000-other"]
    out = cli("export", *runs, "--format", "json", home=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    assert len(rows) == 2
    grouped = next(r for r in rows if len(r["runs"]) == 3)
    values = grouped["avg_robust"]["values"]
    assert grouped["avg_robust"]["mean"] == pytest.approx(statistics.mean(values))
    assert grouped["avg_robust"]["std"] == pytest.approx(statistics.stdev(values))
    md = cli("export", *runs, "--format", "md", home=tmp_path).stdout
    assert f"{statistics.mean(values) * 100:.1f} ± {statistics.stdev(values) * 100:.1f}" in md
    latex = cli("export", *runs, "--format", "latex", "-o", str(tmp_path / "t.tex"), home=tmp_path)
    assert latex.returncode == 0 and r"\pm" in (tmp_path / "t.tex").read_text()
    csv = cli("export", *runs, "--format", "csv", home=tmp_path).stdout.splitlines()
    assert csv[0].startswith("label,n_runs,avg_clean_mean") and len(csv) == 3


def test_tag_note_and_rm(home):
    assert cli("tag", "fair", "paper", "cifar", home=home).returncode == 0
    assert cli("note", "fair", "the good one", home=home).returncode == 0
    doc = json.loads(cli("ls", "--json", "--tag", "paper", home=home).stdout)[0]
    assert doc["tags"] == ["paper", "cifar"] and doc["notes"] == "the good one"
    cli("tag", "fair", "cifar", "--remove", home=home)
    assert json.loads((home / "runs" / "20260101-000001-bbbbbb" / "meta.json").read_text())["tags"] == ["paper"]
    declined = fairtui_cmd("rm", "fair", home=home, timeout=60)  # no --yes, no input: nothing is deleted
    assert declined.returncode != 0 and (home / "runs" / "20260101-000001-bbbbbb").exists()
    assert cli("rm", "fair", "--yes", home=home).returncode == 0
    assert not (home / "runs" / "20260101-000001-bbbbbb").exists()
    assert "fair" not in [d["name"] for d in json.loads(cli("ls", "--json", home=home).stdout)]


def test_stop_a_real_run(tmp_path, tiny_profile):
    import time

    home = tmp_path / "home"
    started = fairtui_cmd("run", str(tiny_profile()), "--set", "train.epochs=200", "--detach", "--json", home=home)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    events = home / "runs" / run_id / "events.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not events.exists() or '"epoch_end"' not in events.read_text()):
        time.sleep(0.1)
    assert json.loads(cli("ls", "--json", home=home).stdout)[0]["status"] == "running"
    stopped = cli("stop", run_id, home=home)
    assert stopped.returncode == 0 and "stopped" in stopped.stderr
    doc = json.loads(cli("ls", "--json", home=home).stdout)[0]
    assert doc["status"] == "stopped"
    assert cli("stop", run_id, home=home).returncode == 2  # not running any more


def test_home_before_the_command(home):
    import subprocess
    import sys

    from tests.conftest import ROOT, engine_env

    out = subprocess.run([sys.executable, "-m", "fairtui.cli", "--home", str(home), "ls", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=engine_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == 3


WAT_STATE = {"weights": [0.0909090909090909] * 11, "val_cost": [1.2345678901234567 + i for i in range(11)],
             "val_cost_sum": [12.345678901234567 * (i + 1) for i in range(11)],
             "next_weights": [0.09090909090909091] * 11}
FRL_STATE = {"phase": "frl", **{key: [0.012345678901234567 * i for i in range(10)] for key in (
    "clean_err_per_class", "bndy_err_per_class", "lambda_nat", "lambda_bndy", "weight_nat", "weight_bndy",
    "eps_per_class", "lambda_margin")}}


@pytest.mark.parametrize("method, state", [("wat", WAT_STATE), ("frl", FRL_STATE)])
def test_show_prints_the_method_state_as_labelled_tables_at_80_columns(tmp_path, method, state):
    """WAT's K + 1 vectors get an 'overall' row first; every vector is a labelled, rounded column; nothing
    is wider than the terminal (tables are split instead)."""
    make_run(tmp_path, "20260101-000000-aaaaaa", name="a-run-with-a-rather-long-name", method=method,
             method_state=state)
    out = fairtui_cmd("show", "aaaaaa", home=tmp_path, timeout=60, env_extra={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "12345678901" not in out.stdout  # rounded, no raw 17-digit floats
    for key in (k for k, v in state.items() if isinstance(v, list)):
        assert any(key in line for line in lines), key
    rows = [line for line in lines if line.startswith("│ ") or line.startswith("┃ ")]
    if method == "wat":
        assert any(row.split("│")[1].strip() == "overall" for row in rows if "│" in row)
        assert "1.235" in out.stdout and "0.09091" in out.stdout
    else:
        assert "phase: frl" in out.stdout
    assert "method state after epoch 5" in out.stdout
