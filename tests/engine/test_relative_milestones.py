"""Milestones counted back from the last epoch ("-k", #72 item 3): the DAFA authors' schedule for every length, and
refusals of milestones that fall before the first epoch."""

import pytest

from engine.contract.profile_io import load_profile
from engine.contract.profile_schema import ProfileError
from engine.training.trainer import lr_at
from tests.conftest import ROOT


def dafa_code_lr(epoch: int, epochs: int) -> float:
    """rucy74/DAFA @ c60ba83, train.py l.156-160 (`bag_of_tricks`), called with the 1-based epoch."""
    lr = 0.1
    if epoch >= epochs - 10:
        lr = 0.01
    if epoch >= epochs - 5:
        lr = 0.001
    return lr


@pytest.mark.parametrize("epochs", [30, 50, 110, 200])
def test_dafa_toml_follows_the_authors_rule_for_any_length(epochs):
    profile = load_profile(ROOT / "profiles" / "dafa.toml", [f"train.epochs={epochs}", "method.warmup_epochs=10"])
    assert profile.train.milestones == (epochs - 11, epochs - 6)
    for epoch in range(1, epochs + 1):
        assert lr_at(epoch, profile) == pytest.approx(dafa_code_lr(epoch, epochs)), epoch


def test_a_milestone_before_the_first_epoch_is_refused():
    with pytest.raises(ProfileError) as err:
        load_profile(ROOT / "profiles" / "dafa.toml", ["train.epochs=8", "method.warmup_epochs=2"])
    assert err.value.key == "train.milestones" and "-10 falls before the first of 8 epochs" in err.value.problem
    with pytest.raises(ProfileError) as err:
        load_profile(ROOT / "profiles" / "dafa.toml", ['train.milestones=["-x"]'])
    assert "a count from the end like \"-10\"" in str(err.value)
