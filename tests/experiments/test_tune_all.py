"""experiments/tune_all.py: its search spaces (every key is one its digits profile takes at both ends of its
range, and the value the profile (the paper) uses lies inside the range, as docs/sweeps-and-slurm.md says), its
untuned rows, and its table, which experiments/results/tune-digits/README.md holds as generated from the committed
files."""

from __future__ import annotations

import pytest

from engine.contract.profile_io import load_profile
from experiments.tune_all import DOCS_END, DOCS_MARK, FINE_TUNES, SPACES, kendall_tau, table
from fairtui.tune.space import check_space, parse_dimension
from tests.conftest import ROOT


@pytest.mark.parametrize("method", sorted(SPACES))
def test_each_methods_space_is_valid_and_holds_the_profiles_value(method):
    profile = str(ROOT / "profiles" / f"digits-{method}.toml")
    base = [f"method.init_from={FINE_TUNES[method]}"] if method in FINE_TUNES else []
    dims = [parse_dimension(item) for item in SPACES[method]]
    check_space(profile, base, dims)  # raises TuneError on a key or an end the profile refuses
    table = load_profile(profile, base).to_table()
    for dim in dims:
        section, key = dim.key.split(".")
        value = table[section].get(key)
        assert value is not None and dim.low <= value <= dim.high, (dim.key, value, dim.spec())


def test_an_untuned_row_is_taken_from_the_digits_tables_home_only_at_the_same_settings(tmp_path):
    """--defaults-from: the digits table's digits-at-s0 run is the untuned row when it trained with what
    tune_all would train (the same profile, seed and --set), and is trained again otherwise."""
    import argparse
    import json
    import subprocess
    import sys

    from experiments.tune_all import default_run
    from tests.conftest import engine_env

    digits = tmp_path / "digits-home"
    small = ["train.epochs=1", "data.train_per_class=20"]
    cmd = [sys.executable, "-m", "fairtui.cli", "run", str(ROOT / "profiles" / "digits-at.toml"), "--name",
           "digits-at-s0", "--set", "seed=0", "--json", "--home", str(digits)]
    for item in small:
        cmd += ["--set", item]
    made = subprocess.run(cmd, cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    run_id = json.loads(made.stdout)["run_id"]
    args = argparse.Namespace(defaults_from=digits, set=small)
    assert default_run("at", 0, args)["run_id"] == run_id
    assert default_run("at", 1, args) is None  # no run of that seed
    assert default_run("at", 0, argparse.Namespace(defaults_from=digits, set=["train.epochs=2"])) is None
    assert default_run("at", 0, argparse.Namespace(defaults_from=None, set=small)) is None


def test_the_docs_table_is_what_tune_all_makes_of_the_committed_files():
    docs = (ROOT / "experiments" / "results" / "tune-digits" / "README.md").read_text()
    block = docs.split(DOCS_MARK.format("tune-digits") + "\n", 1)[1].split("\n" + DOCS_END.format("tune-digits"), 1)[0]
    assert block == table(ROOT / "experiments" / "results" / "tune-digits"), \
        "regenerate: python experiments/tune_all.py --table-only --write-docs experiments/results/tune-digits/README.md"


def test_the_table_pairs_seeds_and_ranks_methods(tmp_path):
    """Two methods, two seeds each, untuned and tuned: the paired differences are taken seed by seed (the
    files' order differs from the seeds'), and the ranking by mean worst class flips."""
    import json

    def run(folder, seed, avg, worst):
        folder.mkdir(parents=True)
        (folder / "profile.toml").write_text(f"seed = {seed}\n")
        event = {"type": "eval_result", "split": "test", "checkpoint": "best", "attack": "pgd20",
                 "avg_robust": avg / 100, "worst_robust": worst / 100}
        (folder / "events.jsonl").write_text(json.dumps(event) + "\n")

    for method, untuned, tuned in (("at", (30, 40), (50, 20)), ("trades", (35, 45), (30, 30))):
        (tmp_path / method).mkdir()
        trials = [{"state": state} for state in ("complete", "pruned", "complete", "fail")]
        (tmp_path / method / "study.json").write_text(json.dumps({"space": {"x": "0:1"}, "trials": trials,
                                                                  "best": {"params": {"method.x": 0.5}, "value": 0.4}}))
        for seed in (0, 1):
            run(tmp_path / method / "default" / f"b{seed}", seed, 70, untuned[seed])
            run(tmp_path / method / "tuned" / f"a{1 - seed}", seed, 70, tuned[seed])
    text = table(tmp_path)
    at = next(line for line in text.splitlines() if line.startswith("| at |"))
    assert at.startswith("| at | x | 2 / 1 / 1 | x 0.5 (40.0) | 70.0 ± 0.0 / 35.0 ± 63.5 | "
                         "70.0 ± 0.0 / 35.0 ± 190.6 |")
    # +20 and -20 points, seed by seed (in the files' order it would be -10 and +10: 0.0 ± 127.0)
    assert at.endswith("| 0.0 ± 254.1 (1 of 2 up) | 2 |")
    assert "| 1 | trades (40.0) | at (35.0) |" in text and "| 2 | at (35.0) | trades (30.0) |" in text
    assert "Kendall's tau between the two orders: -1.00 (2 methods)." in text


def test_kendall_tau_on_hand_counted_orders():
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1.0
    assert kendall_tau(["a", "b", "c", "d"], ["b", "a", "c", "d"]) == pytest.approx(4 / 6)  # 5 agree, 1 not
