"""An exploratory evaluation never replaces a run's headline result (issue: eps 0.05 on 5 per class
became the run's number in ls, show, compare and export)."""

import json

import pytest

from engine.contract.results import differences, is_headline, profile_setting, requested_setting
from tests.conftest import fairtui_cmd, train_tiny

CONFIG = {"seed": 3, "attack": {"eps": 0.2, "step": 0.07, "norm": "linf"},
          "eval": {"eps": 0.2, "step": 0.07, "restarts": 1, "cw_kappa": 50.0, "tpgd_inv_temperature": 5.0},
          "data": {"eval_batch_size": 256}}


def result(attack, setting, **kw):
    return {"type": "eval_result", "attack": attack, "setting": setting, **kw}


def test_identity_includes_everything_that_changes_the_number():
    own = profile_setting(CONFIG, "pgd20")
    assert is_headline(result("pgd20", own), CONFIG)
    for changed in (requested_setting(CONFIG, "pgd20", eps=0.05), requested_setting(CONFIG, "pgd20", n_per_class=5),
                    requested_setting(CONFIG, "pgd20", batch_size=64)):
        assert not is_headline(result("pgd20", changed), CONFIG)
    # AutoAttack reseeds per internal batch: another batching is another result
    assert not is_headline(result("aa", requested_setting(CONFIG, "aa", batch_size=100)), CONFIG)
    assert is_headline(result("aa", requested_setting(CONFIG, "aa")), CONFIG)
    # another eps scales the step with it, and both are recorded
    assert requested_setting(CONFIG, "pgd20", eps=0.1)["step"] == pytest.approx(0.035)
    assert differences(result("pgd20", requested_setting(CONFIG, "pgd20", eps=0.05, n_per_class=5)), CONFIG)[:2] \
        == ["5 per class", "eps 0.05 (profile 0.2)"]
    # a profile with another kappa makes the stored cw result exploratory for it
    assert not is_headline(result("cw20", profile_setting(CONFIG, "cw20")),
                           {**CONFIG, "eval": {**CONFIG["eval"], "cw_kappa": 10.0}})


def test_a_profile_whose_test_split_is_a_fixed_part_names_that_part_in_its_headline():
    """A protocol whose headline is a class-balanced part of the test split (``data.test_per_class``, the quick
    CIFAR-10 protocol) records that part in every result's setting and every title says which part it is. (Groups
    on a part and on the whole split are kept apart by the pairing's protocol check, test_groups.)"""
    from engine.contract.results import describe

    part = {**CONFIG, "data": {**CONFIG["data"], "test_per_class": 200}}
    own = profile_setting(part, "pgd20")
    assert own["split_per_class"] == 200 and "split_per_class" not in profile_setting(CONFIG, "pgd20")
    assert is_headline(result("pgd20", own), part)
    assert not is_headline(result("pgd20", own), CONFIG)  # a result on a part is no whole-split profile's headline
    assert describe(result("pgd20", own)) == "eps 0.2, test part of 200 a class"
    assert describe(result("pgd20", profile_setting(CONFIG, "pgd20"))) == "eps 0.2, whole split"
    assert describe(result("aa", requested_setting(part, "aa", n_per_class=5))) == \
        "eps 0.2, 5 per class of the test part of 200 a class"
    # a result written before settings named the part was measured on it all the same: still the run's headline
    legacy = {k: v for k, v in own.items() if k != "split_per_class"}
    assert is_headline(result("pgd20", legacy), part)


def test_results_written_before_settings_were_recorded_are_judged_by_eps_and_subset():
    assert is_headline({"attack": "pgd20"}, CONFIG)  # the end of training never wrote eps
    assert is_headline({"attack": "pgd20", "eps": 0.2, "n_per_class": 0}, CONFIG)
    assert not is_headline({"attack": "pgd20", "eps": 0.05, "n_per_class": 0}, CONFIG)
    assert not is_headline({"attack": "pgd20", "eps": 0.2, "n_per_class": 5}, CONFIG)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    run_dir = train_tiny(tmp_path_factory.mktemp("identity"))
    home = run_dir.parent.parent
    before = {cmd: fairtui_cmd(*cmd.split(), home=home).stdout
              for cmd in ("ls --json", "show run --json", "export run --format json")}
    proc = fairtui_cmd("eval", "run", "--attack", "pgd5", "--eps", "0.05", "--n-per-class", "5", "--checkpoint",
                       "best", "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    return home, before, json.loads(proc.stdout)


def test_exploratory_eval_reports_its_own_numbers(evaluated):
    _, _, doc = evaluated
    (row,) = doc["results"]
    assert row["eps"] == 0.05 and row["n_per_class"] == 5 and row["setting"]["n_per_class"] == 5


def test_exploratory_eval_leaves_ls_show_and_export_as_they_were(evaluated):
    home, before, _ = evaluated
    after_ls = json.loads(fairtui_cmd("ls", "--json", home=home).stdout)
    assert after_ls[0]["summary"] == json.loads(before["ls --json"])[0]["summary"]
    show = json.loads(fairtui_cmd("show", "run", "--json", home=home).stdout)
    assert show["results"] == json.loads(before["show run --json"])["results"]
    (other,) = show["other_results"]
    assert "5 per class" in other["differs"] and "eps 0.05 (profile 0.2)" in other["differs"]
    assert fairtui_cmd("export", "run", "--format", "json", home=home).stdout == before["export run --format json"]
    reindexed = fairtui_cmd("reindex", home=home)
    assert reindexed.returncode == 0
    assert json.loads(fairtui_cmd("ls", "--json", home=home).stdout)[0]["summary"] == after_ls[0]["summary"]


def test_show_labels_the_other_evaluation(evaluated):
    home, _, _ = evaluated
    human = fairtui_cmd("show", "run", home=home, env_extra={"COLUMNS": "200"}).stdout
    assert "other evaluations" in human and "eps 0.05 (profile 0.2)" in human
    # every table says the setting that produced it: the tiny profile's test split is a fixed part of 10 a class
    assert "test part of 10 a class" in human and "whole split" not in human


def test_a_refusal_names_the_latest_results_and_counts_the_rest(tmp_path):
    """A run evaluated at 30 eps (a sweep) and never at its own: compare's refusal names 10 results and
    counts the other 20, where it named all 30 in one line."""
    from fairtui.judge.compare import CompareError, pick_result
    from fairtui.runs.runfolder import RunView
    from fairtui.runs.synthetic import make_run

    run_dir = make_run(tmp_path, "20260101-000000-aaaaaa", name="sweep", status="running", epochs=1)
    table = json.loads((run_dir / "events.jsonl").read_text().splitlines()[0])["config"]
    with open(run_dir / "events.jsonl", "a") as fh:
        for i in range(1, 31):
            fh.write(json.dumps({"v": 1, "seq": 10 + i, "type": "eval_result", "split": "test", "checkpoint": "best",
                                 "attack": "pgd20", "setting": requested_setting(table, "pgd20", eps=i / 1000),
                                 "robust_acc_per_class": [0.5] * 10, "clean_acc_per_class": [0.9] * 10}) + "\n")
    with pytest.raises(CompareError) as err:
        pick_result(RunView.load(run_dir), None, "best")
    message = str(err.value)
    assert message.count("test best/pgd20") == 10 and "and 20 earlier" in message
    assert "eps 0.03," in message and "eps 0.001," not in message  # the latest are named
