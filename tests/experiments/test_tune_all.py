"""experiments/tune_all.py's search spaces: every key is one its digits profile takes at both ends of its
range, and the value the profile (the paper) uses lies inside the range, as docs/sweeps-and-slurm.md says."""

from __future__ import annotations

import pytest

from engine.contract.profile_io import load_profile
from experiments.tune_all import FINE_TUNES, SPACES
from fairtui.tune_space import check_space, parse_dimension
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
