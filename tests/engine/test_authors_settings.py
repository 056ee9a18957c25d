"""Profiles that call themselves the authors' code's setting train the authors' arithmetic (#72): the textbook
TRADES KL (a method's code form, or `attack.kl = "textbook"`), one rule for every code form (WAT's `loss_form`
included), and a header that says what still differs; `data.val_fraction = 0` trains on the whole training set
where the method does not read a validation split, and is refused where it does."""

import glob
import tomllib
from pathlib import Path

import pytest

from engine.contract.config import Profile, trades_kl_form
from engine.contract.method_params import DAFAParams, TRADESParams, WATParams
from engine.contract.profile_io import load_profile
from engine.contract.profile_schema import ProfileError
from tests.conftest import ROOT, TINY, events_of, make_run_dir, run_engine

AUTHORS = [p for p in sorted(glob.glob(str(ROOT / "profiles" / "*.toml")))
           if "the authors' code's setting" in tomllib.loads(Path(p).read_text()).get("description", "")]


def test_the_authors_settings_are_the_ones_the_audit_named():
    assert sorted(Path(p).name for p in AUTHORS) == ["absld.toml", "bat.toml", "csr.toml", "dafa.toml", "faal.toml",
                                                     "trix.toml"]


@pytest.mark.parametrize("path", AUTHORS, ids=lambda p: Path(p).name)
def test_every_authors_setting_resolves_to_the_textbook_kl_and_says_what_differs(path):
    assert trades_kl_form(load_profile(path)) == "textbook"  # ABSLD has no TRADES KL: its form is "code" too
    header = Path(path).read_text().split("\nname = ")[0]
    assert "Still differs from the authors' code" in header and "val_fraction=0" in header and "bf16" in header


def test_one_rule_every_code_form_takes_the_textbook_kl():
    for params in (TRADESParams(form="code"), DAFAParams(form="code"), WATParams(loss_form="code")):
        assert trades_kl_form(Profile(method=params)) == "textbook", params
    for params in (TRADESParams(), DAFAParams(), WATParams()):
        assert trades_kl_form(Profile(method=params)) == "log_space", params
    assert trades_kl_form(load_profile(ROOT / "profiles" / "trades.toml")) == "textbook"
    assert load_profile(ROOT / "profiles" / "cifar10-cpu-trades.toml").method.form == "paper"


@pytest.mark.parametrize("method", ["wat", "frl", "cfa"])
def test_a_method_that_reads_the_validation_split_refuses_none(tmp_path, method):
    with pytest.raises(ProfileError) as err:
        load_profile(ROOT / "profiles" / f"digits-{'cfa-trades' if method == 'cfa' else method}.toml",
                     ["data.val_fraction=0", "data.val_per_class=0"])
    assert err.value.key == "data.val_fraction" and "needs one" in err.value.problem


def test_val_fraction_zero_trains_on_the_whole_training_set_and_reports_the_last_epoch(tmp_path):
    profile = tmp_path / "dafa.toml"
    profile.write_text(TINY.replace("val_per_class = 5", "val_per_class = 0\nval_fraction = 0.0")
                       .replace('name = "pgd_at"', 'name = "dafa"\nform = "code"\nwarmup_epochs = 1'))
    run_dir = make_run_dir(tmp_path, profile)
    assert run_engine(run_dir).returncode == 0
    events = events_of(run_dir)
    started = events[0]
    assert sum(started["split_sizes"]["val"]) == 0 and started["trades_kl"] == "textbook"
    assert sum(started["split_sizes"]["train"]) == 300  # every training image: 30 a class
    assert {e["checkpoint"] for e in events if e["type"] == "eval_result"} == {"last"}
