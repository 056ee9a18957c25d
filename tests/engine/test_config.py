"""Profiles: strict parsing, clear `FILE: KEY: problem` errors, overrides and the resolved file."""

import re

import pytest

from engine.contract.profile_io import dumps_profile, load_profile, parse_override
from engine.contract.profile_schema import ProfileError, parse_fraction
from tests.conftest import ROOT, TINY


@pytest.mark.parametrize("extra, key, words", [
    ("[train]\nepochz = 3", "train.epochz", "unknown key; did you mean 'epochs'"),
    ("[data]\nbatch_size = \"big\"", "data.batch_size", "expected an integer"),
    ("[attack]\nnorm = \"linf\"\neps = -0.1", "attack.eps", "greater than 0"),
    ("[train]\nepochs = 0", "train.epochs", "at least 1"),
    ("[data]\ndataset = \"cifar11\"", "data.dataset", "did you mean 'cifar10'"),
    ("[model]\narch = \"resnet50\"", "model.arch", "unknown value 'resnet50'"),
    ("[eval]\nattacks = [\"pgd20\", \"deepfool\"]", "eval.attacks", "unknown attack 'deepfool'"),
    ("[method]\nname = \"frll\"", "method.name", "unknown method 'frll'"),
    ("[method]\nname = \"trades\"\nbeta = \"six\"", "method.beta", "expected a number"),
    ("[method]\nname = \"pgd_at\"\nbeta = 6.0", "method.beta", "unknown key"),
    ("[attack]\neps = \"8/0\"", "attack.eps", "fraction"),
    ("[attack]\neps = 1.5", "attack.eps", "(0, 1]"),
    ("[train]\nmilestones = [10, 5]", "train.milestones", "increasing"),
    ("[trian]\nepochs = 3", "trian", "did you mean 'train'"),
    ("[train]\nema_decay = true", "train.ema_decay", "expected a number"),
])
def test_bad_profile_names_file_key_and_problem(tmp_path, extra, key, words):
    path = tmp_path / "bad.toml"
    path.write_text(extra)  # everything else takes its default
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert words in message


def test_eps_accepts_fraction_strings(tiny_profile):
    p = load_profile(tiny_profile(base=TINY.replace("eps = 0.2", 'eps = "8/255"')))
    assert p.attack.eps == pytest.approx(8 / 255)
    assert p.eval.eps == pytest.approx(8 / 255)  # evaluation inherits the training eps
    assert parse_fraction("2/255") == pytest.approx(2 / 255)


def test_overrides_apply_and_are_checked(tiny_profile):
    path = tiny_profile()
    p = load_profile(path, ["train.epochs=5", "method.name=trades", "method.beta=3", "attack.eps=16/255"])
    assert (p.train.epochs, p.method.name, p.method.beta) == (5, "trades", 3.0)
    assert p.attack.eps == pytest.approx(16 / 255)
    with pytest.raises(ProfileError, match=r"^--set: train.epochs: must be at least 1"):
        load_profile(path, ["train.epochs=0"])
    with pytest.raises(ProfileError, match=r"^--set: method.lambda9: unknown key"):
        load_profile(path, ["method.lambda9=0.3"])
    with pytest.raises(ProfileError, match="expected KEY=VALUE"):
        load_profile(path, ["train.epochs"])
    assert parse_override("data.dataset=digits") == ("data.dataset", "digits")


def test_a_typed_line_of_overrides_keeps_its_toml_quotes():
    from engine.contract.profile_io import split_overrides

    line = 'train.epochs=3  eval.attacks=["clean"] eval.checkpoints=["last", "best"] name="a b" data.root=/d'
    assert split_overrides(line) == ["train.epochs=3", 'eval.attacks=["clean"]', 'eval.checkpoints=["last", "best"]',
                                     'name="a b"', "data.root=/d"]
    assert [parse_override(t)[1] for t in split_overrides(line)][1:4] == [["clean"], ["last", "best"], "a b"]
    # the shell's quoting of a whole override still works, and what is inside is left as typed
    assert split_overrides("'eval.attacks=[\"clean\"]' \"name='x y'\"") == ['eval.attacks=["clean"]', "name='x y'"]
    assert split_overrides("") == []
    for bad in ('name="open', "eval.attacks=[\"clean\""):
        with pytest.raises(ValueError):
            split_overrides(bad)


def test_resolved_profile_round_trips(tiny_profile, tmp_path):
    p = load_profile(tiny_profile(), ["method.name=trades", "method.beta=2.5"])
    out = tmp_path / "resolved.toml"
    out.write_text(dumps_profile(p))
    assert load_profile(out) == p


@pytest.mark.parametrize("path", sorted((ROOT / "profiles").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_profiles_load(path):
    load_profile(path)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ProfileError, match="no such profile file"):
        load_profile(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nepochs = 3")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(bad)


def test_a_milestone_after_the_last_epoch_is_a_warning_not_an_error(tiny_profile):
    """`--set train.epochs=3` on a 30-epoch profile runs; the milestones that cannot fire are named."""
    from engine.contract.config import profile_warnings
    from engine.contract.profile_io import load_profile

    p = load_profile(tiny_profile(), ["train.epochs=3", "train.milestones=[2, 3, 20]"])
    assert p.train.milestones == (2, 3, 20)
    assert profile_warnings(p) == [
        "train.milestones: milestone 3 is at the last epoch (3) and will not fire",
        "train.milestones: milestone 20 is after the last epoch (3) and will not fire"]
    assert profile_warnings(load_profile(tiny_profile(), ["train.milestones=[1]"])) == []
    # two percentages that fall on one epoch (75% and 90% of 2): one warning, not the same line twice
    assert profile_warnings(load_profile(tiny_profile(), ["train.epochs=2", 'train.milestones=["75%", "90%"]'])) == [
        "train.milestones: milestone 2 is at the last epoch (2) and will not fire"]


@pytest.mark.parametrize("epochs, expected", [(200, (100, 150)), (30, (15, 23)), (7, (4, 6)), (1, (1, 1))])
def test_percent_milestones_are_the_cfa_authors_rule(tiny_profile, epochs, expected):
    """"p%" is the first epoch e with (e - 1) / epochs >= p: the lr drops after epoch ceil(p * epochs)."""
    from engine.contract.profile_io import load_profile
    from engine.training.trainer import lr_at

    p = load_profile(tiny_profile(), [f"train.epochs={epochs}", 'train.milestones=["50%", "75%"]'])
    assert p.train.milestones == expected
    for epoch in range(1, epochs + 1):  # the authors' lr_schedule(t) with t = epoch - 1
        t = epoch - 1
        authors = 0.05 if t / epochs < 0.5 else 0.005 if t / epochs < 0.75 else 0.0005
        assert lr_at(epoch, p) == pytest.approx(authors, rel=1e-9), epoch


@pytest.mark.parametrize("value, problem", [('["0%"]', "in (0%, 100%]"), ('["half"]', "a percentage like"),
                                            ('["50"]', "a percentage like")])
def test_bad_percent_milestones_name_the_key(tiny_profile, value, problem):
    from engine.contract.profile_io import load_profile
    from engine.contract.profile_schema import ProfileError

    with pytest.raises(ProfileError, match=f"train.milestones: item 0: .*{re.escape(problem)}"):
        load_profile(tiny_profile(), [f"train.milestones={value}"])


FORM_OWNED = re.compile(r"^(tau1|tau2|alpha2|alpha_margin|alpha_schedule|margin_form|lambda1|fawa_decay|"
                        r"fawa_threshold|calibration_start_epoch|tie_rule|pgd_second_step) = ", re.M)


# The keys a scaled profile pins by the scaled protocols' rule (docs/profiles-and-methods.md, "Scaled protocols
# keep each mechanism acting"): FAWA's gate and FRL's multiplier steps, scaled to the protocol.
SCALED_PINS = re.compile(r"^(fawa_threshold|alpha2|alpha_margin) = ", re.M)


@pytest.mark.parametrize("path", sorted((ROOT / "profiles").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_profiles_leave_form_owned_keys_to_the_form(path):
    """`--set method.form="code"` must change every value the code form owns: a shipped profile pins none
    of them. The documented exceptions: FAWA's start, scaled to a profile's schedule, and in a scaled profile the
    keys its rule scales (FAWA's gate, FRL's alphas); the authors'-setting profiles pin none of those."""
    text = path.read_text()
    if path.stem.startswith(("digits-", "cifar10-cpu-", "cifar10-short-")):
        text = SCALED_PINS.sub("", text)
    assert not FORM_OWNED.search(text), path.name


def test_a_key_pinned_against_the_form_is_named_with_both_values(tmp_path):
    from engine.contract.config import pinned_form_keys
    from engine.contract.profile_io import apply_overrides, read_toml

    frl = tmp_path / "frl.toml"
    frl.write_text(TINY.replace('name = "pgd_at"', 'name = "frl"\ntau1 = 0.05\npretrain_epochs = 1'))
    raw = read_toml(frl)
    assert pinned_form_keys(raw) == []  # the paper's form also says 0.05: nothing is overridden
    (warning,) = pinned_form_keys(apply_overrides(raw, ['method.form="code"']))
    assert warning == ('method.tau1 = 0.05 is pinned by the profile; method.form = "code" would set 0.07: the '
                       "profile's value is used")
    cfa = tmp_path / "cfa.toml"
    cfa.write_text(TINY.replace('name = "pgd_at"', 'name = "cfa"\nform = "code"').replace(
        "threads = 1", "threads = 1\nema_decay = 0.5"))
    assert pinned_form_keys(read_toml(cfa)) == [
        'train.ema_decay = 0.5 is pinned by the profile; method.form = "code" would set 0.88: the profile\'s value '
        "is used"]


def test_a_shipped_profile_that_keeps_its_form_does_not_warn_of_its_own_pins():
    """digits-cfa-at pins FAWA's start at 8 (scaled to 30 epochs): a run of it as written says nothing; a run
    that changes the form on the command line is told that the profile's pin is kept (#56 item 10)."""
    from pathlib import Path

    from engine.contract.config import pinned_form_keys
    from engine.contract.profile_io import apply_overrides, read_toml

    root = Path(__file__).resolve().parents[2] / "profiles"
    for path in sorted(root.glob("*.toml")):
        written = read_toml(path)
        assert pinned_form_keys(written, str(path), written) == [], path.name
    written = read_toml(root / "digits-cfa-at.toml")
    (warning,) = pinned_form_keys(apply_overrides(written, ['method.form="code"']), "p", written)
    assert warning.startswith('method.fawa_start_epoch = 8 is pinned by the profile; method.form = "code"')


def test_fairtui_run_prints_the_pinned_key_warning(tmp_path):
    from tests.conftest import fairtui_cmd

    frl = tmp_path / "frl.toml"
    frl.write_text(TINY.replace('name = "pgd_at"', 'name = "frl"\nalpha_margin = 0.05\npretrain_epochs = 1'))
    out = fairtui_cmd("run", str(frl), "--set", 'method.form="code"', home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("method.alpha_margin = 0.05 is pinned by the profile; method.form = \"code\" would "
                            "set 0.2") == 1, out.stderr
