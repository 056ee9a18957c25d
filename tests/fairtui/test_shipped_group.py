"""A profile's runs labelled apart by what they change: `--baseline NAME` names the group that holds the shipped
profiles/NAME.toml's values (#83 item 8), in `compare` as in `judge`; a distillation's teacher, like a fine-tune's
base, is a run of a profile up to its seed, so a method's seeds with their own teachers are one group."""

from __future__ import annotations

from fairtui.judge.groups import compare_groups
from fairtui.judge.sources import grouped, read_results
from fairtui.runs.configurations import configuration, shipped_group
from tests.conftest import ROOT

RESULTS = ROOT / "experiments" / "results"


def test_the_shipped_profiles_group_is_the_baseline_among_its_variants():
    views, _ = read_results([RESULTS / "judge-quick-dafa-lambda2", RESULTS / "cifar10-cpu-quick"])
    groups = grouped(views, "profile")
    assert "cifar10-cpu-quick-dafa" not in groups  # two configurations: each labelled by its lambda
    assert shipped_group("cifar10-cpu-quick-dafa", groups, ROOT / "profiles") == \
        "cifar10-cpu-quick-dafa (method.dafa_lambda=1.0)"
    cmp = compare_groups(groups, "cifar10-cpu-quick-dafa (method.dafa_lambda=1.0)", "pgd20", "last")
    (p,) = [p for p in cmp.pairings if p.group.endswith("2.0)")]
    assert round(100 * p.results["worst_robust"].mean, 1) == 2.5  # the committed judgement's verdict line
    assert shipped_group("cifar10-cpu-quick-trades", groups, ROOT / "profiles") is None  # one group: no variants
    assert shipped_group("no-such-profile", groups, ROOT / "profiles") is None


def test_a_students_teachers_of_each_seed_are_one_teacher_profile(tmp_path):
    from fairtui.runs.configurations import by_configuration
    from fairtui.runs.runfolder import RunView
    from fairtui.runs.synthetic import make_run

    teachers = [make_run(tmp_path, f"t{s}", name="quick-teacher", method="trades", seed=s) for s in range(3)]
    views = [RunView.load(make_run(tmp_path, f"s{s}", name="quick-absld", method="trades", seed=s)) for s in range(3)]
    for view, teacher in zip(views, teachers):
        view.config.setdefault("method", {})["teacher"] = str(teacher / "checkpoints" / "last.pt")
    assert {configuration(v)["method.teacher"] for v in views} == {"a run of quick-teacher"}
    assert [label for label, _ in by_configuration(views)] == ["quick-absld"]  # one group, not one a seed


def test_show_and_the_run_screen_name_a_runs_teacher():
    from fairtui.runs.runstate import RunState, describe_summary, teacher_text

    record = {"run_id": "20261202-0500-abc", "checkpoint": "last", "epoch": 6, "profile": "cifar10-cpu-quick-teacher",
              "arch": "preact_resnet18", "base_width": 16, "seed": 2, "sha256": "f" * 64}
    assert teacher_text(record) == ("taught by run 20261202-0500-abc's last checkpoint (epoch 6; "
                                    "cifar10-cpu-quick-teacher, preact_resnet18 width 16, seed 2); sha256 "
                                    "ffffffffffffffff...")
    assert teacher_text(None) is None
    state = RunState()
    state.ingest({"type": "run_started", "config": {"train": {"epochs": 6}}, "teacher": record})
    assert describe_summary(state) == "running | teacher 20261202-0500-abc"
