"""The quick CPU protocol (profiles/cifar10-cpu-quick-*.toml): one profile for every row of the CPU-scale table,
each the CPU-scale profile with only the protocol's own keys changed, and the schedule-dependent settings scaled
as the CPU scale scales them."""

import math
import tomllib
from pathlib import Path

import pytest

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
FULL = sorted(p for p in PROFILES.glob("cifar10-cpu-*.toml") if not p.name.startswith("cifar10-cpu-quick-"))

# What the quick protocol changes, for every method; anything else must stay the CPU scale's.
PROTOCOL = {("data", "train_per_class"): 500, ("data", "val_per_class"): 50, ("data", "test_per_class"): 200,
            ("attack", "steps"): 3, ("train", "threads"): 1, ("eval", "checkpoints"): None}
TRAINED = {("train", "epochs"): 6, ("train", "lr"): 0.05, ("train", "milestones"): [4, 5]}  # not the fine-tunes


def flat(table: dict, prefix=()) -> dict:
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flat(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def nearest_dafa_warmup(path: Path) -> int:
    """The warm-up that gives DAFA's class weights the share of the summed lr nearest the authors' code's."""
    from engine.contract.mechanisms import DAFA_CODE_SHARE, dafa_share
    from engine.contract.profile_io import load_profile

    epochs = tomllib.loads(path.read_text())["train"]["epochs"]
    return min(range(1, epochs), key=lambda w: abs(dafa_share(load_profile(path, [f"method.warmup_epochs={w}"])).share
                                                   - DAFA_CODE_SHARE))


def test_every_cpu_scale_row_has_a_quick_profile():
    assert len(FULL) == 14
    for full in FULL:
        assert (PROFILES / full.name.replace("cifar10-cpu-", "cifar10-cpu-quick-")).is_file(), full.name


@pytest.mark.parametrize("full", FULL, ids=lambda p: p.stem)
def test_a_quick_profile_is_its_cpu_scale_profile_with_only_the_protocol_changed(full):
    quick_path = PROFILES / full.name.replace("cifar10-cpu-", "cifar10-cpu-quick-")
    a, b = flat(tomllib.loads(full.read_text())), flat(tomllib.loads(quick_path.read_text()))
    method = full.stem[len("cifar10-cpu-"):]
    fine_tune = a[("train", "epochs")] < 15
    expected = dict(PROTOCOL)
    if not fine_tune:
        expected.update(TRAINED)
    scaled = {}
    if method in ("dafa", "trix"):  # the scaled protocols' rule: the warm-up whose W share is nearest the code's
        scaled[("method", "warmup_epochs")] = nearest_dafa_warmup(quick_path)
    if method.startswith("cfa"):  # the paper's 50 of 200; its 2% validation; the gate: one image of its worst class
        scaled[("method", "fawa_start_epoch")] = math.ceil(6 * 50 / 200)
        scaled[("data", "val_extra_per_class")] = 100 - 50
        scaled[("method", "fawa_threshold")] = 1 / 100
    if method == "frl":  # a third of the pre-training, as 5 after 15; the paper's summed step 2.0 over 2 epochs
        scaled[("train", "epochs")] = 6 // 3
        scaled.update({("method", k): 1.0 for k in ("alpha1", "alpha2", "alpha_margin")})
    if method == "wat":  # 0.007 at 8/255 and 10 steps, scaled with eps (x1/2) and steps (x10/3)
        scaled[("attack", "step")] = pytest.approx(0.007 * 0.5 * 10 / 3, abs=1e-4)
    if ("method", "teacher") in a:  # the protocol's own teacher run
        scaled[("method", "teacher")] = a[("method", "teacher")].replace("cifar10-cpu-", "cifar10-cpu-quick-")
    if ("method", "init_from") in a:
        scaled[("method", "init_from")] = a[("method", "init_from")].replace("cifar10-cpu-", "cifar10-cpu-quick-")
    expected.update(scaled)
    assert b[("name",)] == f"cifar10-cpu-quick-{method}"
    for key, value in expected.items():
        if key == ("eval", "checkpoints"):
            assert b[key] == [c for c in a[key] if c != "best"], key  # the last (and FAWA), never the noisy best
        else:
            assert b.get(key) == value, key
    same = set(a) - set(expected) - {("name",), ("description",)}
    assert {k: b.get(k) for k in same} == {k: a[k] for k in same}
    assert set(b) - set(a) <= set(expected)
