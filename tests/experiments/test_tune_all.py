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
