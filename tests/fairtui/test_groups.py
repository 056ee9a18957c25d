"""Groups of seeds judged against a baseline (fairtui.judge.stats, fairtui.judge.groups, `fairtui compare --by/--group`): the
statistics against hand-computed cases, pairing by seed with the dropped seeds named, fine-tunes paired with the runs
they started from, the protocol check, and committed results read without a byte written."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

from fairtui.judge import stats
from tests.conftest import fairtui_cmd

CLASSES = ["a", "b", "c", "d"]


# -- the statistics, by hand ------------------------------------------------------------------------------------

def test_t_interval_is_students_t_by_hand():
    # mean 0.33, sd 0.03, n 3: t_{0.975, 2} = 4.302653 (the textbook table's 4.303)
    mean, lo, hi = stats.t_interval([0.30, 0.36, 0.33])
    assert mean == pytest.approx(0.33)
    assert hi - mean == pytest.approx(4.302653 * 0.03 / math.sqrt(3), rel=1e-6)
    assert mean - lo == pytest.approx(hi - mean)
    assert math.isnan(stats.t_interval([0.5])[1])  # one seed: no width, not zero width


def test_paired_t_p_by_the_closed_form_of_two_degrees_of_freedom():
    # diffs 2, 4, 6 (points): mean 4, sd 2, t = 4 / (2 / sqrt 3) = sqrt 12; with 2 df the t tail is closed-form:
    # P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2
    t = math.sqrt(12)
    expected = 2 * 0.5 * (1 - t / math.sqrt(t * t + 2))
    assert stats.paired_t_p([0.02, 0.04, 0.06]) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(0.0741799, abs=1e-7)
    # no spread (a tie on the grid): no t-test at all, not p 0 (test_sequential: the exact test speaks there)
    assert math.isnan(stats.paired_t_p([0.01, 0.01])) and math.isnan(stats.paired_t_p([0.0, 0.0]))
    assert math.isnan(stats.paired_t_p([0.1]))


def test_sign_flip_p_counts_the_sign_vectors_by_hand():
    # 1, 1, 1, -1: observed sum 2. A sign vector's sum is 2k - 4 for k plus signs; |2k - 4| >= 2 for k in
    # {0, 1, 3, 4}: 1 + 4 + 4 + 1 = 10 of the 16 vectors.
    assert stats.sign_flip_p([0.01, 0.01, 0.01, -0.01]) == pytest.approx(10 / 16)
    # all of one sign: only all-plus and all-minus reach the observed sum: 2 / 2^n, the smallest p there is
    assert stats.sign_flip_p([0.01, 0.02, 0.03]) == pytest.approx(2 / 8)
    assert stats.sign_flip_p([0.1, 0.2, 0.05, 0.3, 0.02]) == pytest.approx(2 / 32)
    # 3, -1, 2: observed 4; sums of +-3 +-1 +-2: 6, 4, 2, 0, 0, -2, -4, -6: |s| >= 4 for 4 of 8
    assert stats.sign_flip_p([0.03, -0.01, 0.02]) == pytest.approx(4 / 8)
    assert math.isnan(stats.sign_flip_p([0.01] * 11))  # not enumerated past 10


def test_planning_numbers_are_the_paired_t_tests_by_hand():
    # standardised effect 1: the classic answer is 10 pairs (power 0.803), 9 fall short (0.759); effect 0.5 needs 34
    # (0.808; 33 give 0.798). So 2 points at a spread of 2 points need 10 seeds, and 10 seeds of spread 1 point
    # detect 0.996 points (G*Power's d_z = 0.9959 for n = 10, alpha 0.05, power 0.8; 1.6818 for n = 5)
    assert stats.power_paired(1.0, 10) == pytest.approx(0.8031, abs=5e-4)
    assert stats.power_paired(1.0, 9) < 0.8
    assert stats.power_paired(0.5, 34) >= 0.8 > stats.power_paired(0.5, 33)
    assert stats.seeds_for_effect(0.02, 0.02) == 10
    assert stats.seeds_for_effect(0.01, 0.02) == 34
    assert stats.seeds_for_effect(0.02, 0.0) == 2  # no spread: any two seeds show it
    assert stats.seeds_for_effect(0.02, math.nan) is None and stats.seeds_for_effect(0.0, 0.01) is None
    assert stats.detectable_difference(0.01, 10) == pytest.approx(0.009959, abs=2e-6)
    assert stats.detectable_difference(1.0, 5) == pytest.approx(1.6818, abs=2e-4)
    assert stats.power_paired(stats.detectable_difference(1.0, 2), 2) == pytest.approx(0.8)  # far in the tail
    assert stats.detectable_difference(0.01, 1) is None and stats.detectable_difference(0.0, 5) is None


def test_paired_plans_from_the_spread_and_the_named_effect_never_from_the_observed_difference():
    # two sets of differences with the same spread (sd 1 point) and other means: the planning numbers are the same
    # (post-hoc power would follow the mean, as the p-value does)
    small, large = stats.paired([-0.005, 0.005, 0.015, 0.0, 0.01]), stats.paired([0.05, 0.06, 0.07, 0.055, 0.065])
    assert small.p > 0.05 > large.p
    assert small.detectable == pytest.approx(large.detectable)
    assert small.seeds_for_effect == large.seeds_for_effect == stats.seeds_for_effect(0.02, 0.0079057, 0.8)
    assert stats.paired([0.0, 0.01, 0.02], effect=0.01).seeds_for_effect == 10
    assert stats.paired([0.01]).detectable is None and stats.paired([0.01]).seeds_for_effect is None


def test_holm_adjusts_each_p_by_its_rank_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): 4 x 0.005 = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, 1 x 0.04 = 0.04,
    # which the running maximum lifts to 0.06; returned in the order given
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = stats.holm([math.nan, 0.02, 0.5])  # NaN is neither counted nor changed: m = 2
    assert math.isnan(adjusted[0]) and adjusted[1:] == pytest.approx([0.04, 0.5])
    assert stats.holm([0.6, 0.7]) == [1.0, 1.0] and stats.holm([0.01]) == [0.01] and stats.holm([]) == []


def test_verdict_follows_the_interval():
    assert stats.paired([0.02, 0.04, 0.06]).verdict == "not distinguishable at 3 seeds"  # p 0.074
    better = stats.paired([0.05, 0.06, 0.055, 0.052])
    # below 6 seeds the exact test cannot reach 5% (2 / 2^4 = 0.125): the verdict says it rests on the t-test
    assert better.verdict == "better (t-test; the exact test cannot go below 0.125 at 4 seeds)"
    assert better.decision == "better" and better.ci95[0] > 0 and better.p < 0.05
    six = stats.paired([0.05, 0.06, 0.055, 0.052, 0.058, 0.051])  # 2 / 2^6 = 0.031: the exact test could speak
    assert six.verdict == "better" and six.p_permutation == pytest.approx(2 / 64)
    assert stats.paired([-0.05, -0.06, -0.055]).verdict.startswith("worse (t-test; the exact test cannot go below 0.25")
    assert stats.paired([0.05]).verdict == "not distinguishable at 1 seed"


# -- run folders for the groups ---------------------------------------------------------------------------------

def write_run(root: Path, profile: str, run_id: str, seed: int, robust: list[float], clean: float = 0.8,
              dataset: str = "cifar10", eps: float = 4 / 255, init_from: str = "", method: str = "pgd_at",
              best: list[float] | None = None, epochs: tuple = (None, None), init: dict | None = None,
              runtime: str | None = None, test_per_class: int = 0, train: dict | None = None) -> Path:
    """A finished run's small files, as experiments/results holds them: run_started (with ``init``, what a
    fine-tune loaded, as the engine records it, and ``runtime``, what it trained with; none: fp32), one test result at the best checkpoint (``best``, else ``robust``)
    and the last (``robust``), of ``epochs``, and run_finished."""
    run_dir = root / profile / run_id
    run_dir.mkdir(parents=True)
    config = {"name": profile, "seed": seed, "data": {"dataset": dataset, "train_per_class": 100,
                                                      **({"test_per_class": test_per_class} if test_per_class else {})},
              "model": {"arch": "preact_resnet18", "base_width": 8}, "attack": {"eps": eps},
              "train": train or {"epochs": 30, "lr": 0.05, "schedule": "piecewise", "milestones": ["75%"]},
              "eval": {"eps": eps, "attacks": ["pgd20"]}, "method": {"name": method, "init_from": init_from}}
    (run_dir / "profile.toml").write_text(f'name = "{profile}"\nseed = {seed}\n')
    (run_dir / "meta.json").write_text(json.dumps({"run_id": run_id, "name": f"{profile}-s{seed}", "tags": ["t"]}))
    events = [{"v": 1, "seq": 0, "t": 0, "run_id": run_id, "type": "run_started", "config": config,
               "num_classes": 4, "class_names": CLASSES, "device": "cpu", "seed": seed,
               "split_sizes": {"train": [100] * 4, "test": [50] * 4}, **({"init": init} if init else {}),
               **({"runtime": runtime} if runtime else {})}]
    for i, (ckpt, acc) in enumerate((("best", best or robust), ("last", robust))):
        events.append({"v": 1, "seq": 1 + i, "t": 0, "run_id": run_id, "type": "eval_result", "split": "test",
                       "checkpoint": ckpt, "attack": "pgd20", "eps": eps, "clean_acc_per_class": [clean] * 4,
                       "robust_acc_per_class": acc, **({"epoch": epochs[i]} if epochs[i] is not None else {})})
    events.append({"v": 1, "seq": 3, "t": 0, "run_id": run_id, "type": "run_finished", "status": "completed"})
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run_dir


def folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


BASE_WORST = {0: 0.10, 1: 0.14, 2: 0.12, 4: 0.20}
NEW_WORST = {0: 0.15, 1: 0.17, 2: 0.18, 3: 0.30}


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    for seed, worst in BASE_WORST.items():
        write_run(root, "cpu-base", f"20260101-00000{seed}-base{seed:02d}", seed, [worst, 0.4, 0.5, 0.6])
    for seed, worst in NEW_WORST.items():
        write_run(root, "cpu-new", f"20260102-00000{seed}-new{seed:03d}", seed, [worst, 0.4, 0.5, 0.5])
    return root


def test_compare_by_profile_pairs_by_seed_names_the_dropped_seeds_and_writes_nothing(results, tmp_path):
    from scipy import stats as scipy_stats

    before = folder_digest(results)
    out = fairtui_cmd("compare", "--results", str(results), "--by", "profile", "--baseline", "cpu-base",
                      "--checkpoint", "last", "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert folder_digest(results) == before  # committed results are only read
    (worst,) = [e for e in doc["paired"] if e["metric"] == "worst_robust"]
    assert worst["group"] == "cpu-new" and worst["baseline"] == "cpu-base" and worst["n"] == 3
    assert worst["dropped_seeds"] == [3, 4] and worst["seeds"] == [0, 1, 2]
    new, base = [NEW_WORST[s] for s in (0, 1, 2)], [BASE_WORST[s] for s in (0, 1, 2)]
    diffs = [a - b for a, b in zip(new, base)]  # 0.05, 0.03, 0.06
    test = scipy_stats.ttest_rel(new, base)
    assert worst["mean"] == pytest.approx(sum(diffs) / 3)
    assert worst["p"] == pytest.approx(test.pvalue, rel=1e-9)
    ci = test.confidence_interval(0.95)
    assert worst["ci95"] == pytest.approx([ci.low, ci.high], rel=1e-9)
    assert worst["p_permutation"] == pytest.approx(2 / 8)
    assert worst["verdict"] == "better (t-test; the exact test cannot go below 0.25 at 3 seeds)"  # [+0.9, +8.5] points: 4.67 ± 4.303 x 1.53 / sqrt 3
    # rho (WAT Eq. 7) per seed: (worst - worst_b) / worst_b - (avg_b - avg) / avg_b
    avg = lambda w, last: (w + 0.4 + 0.5 + last) / 4  # noqa: E731
    rho0 = (0.15 - 0.10) / 0.10 - (avg(0.10, 0.6) - avg(0.15, 0.5)) / avg(0.10, 0.6)
    assert worst["rho_per_seed"][0] == pytest.approx(rho0)
    groups = {g["label"]: g for g in doc["groups"]}
    assert groups["cpu-new"]["seeds"] == [0, 1, 2, 3]
    assert groups["cpu-base"]["worst_robust"]["mean"] == pytest.approx(sum(BASE_WORST.values()) / 4)


def test_a_pairing_across_runtimes_says_so_in_every_format_and_one_runtime_says_nothing(results, tmp_path):
    """A method trained in bf16 paired with fp32 baselines (a new method on a CPU with bf16 units against the
    committed fp32 rows): the numbers are the same pairing, and every format says that the two sides trained in
    other runtimes; where both sides trained alike, nothing is said."""
    import csv
    import io

    common = ["--results", str(results), "--by", "profile", "--baseline", "cpu-base", "--checkpoint", "last"]
    plain = fairtui_cmd("compare", *common, home=tmp_path / "home")
    assert plain.returncode == 0 and "another runtime" not in plain.stdout
    assert "another runtime" not in fairtui_cmd("export", *common, "--format", "md", home=tmp_path / "home").stdout
    before = json.loads(fairtui_cmd("compare", *common, "--json", home=tmp_path / "home").stdout)
    assert {e["runtime"]["group"][0] for e in before["paired"]} == {"fp32"}

    bf16 = "autocast bfloat16, channels-last"
    for seed, worst in NEW_WORST.items():  # the same numbers, trained in bf16
        events = results / "cpu-new" / f"20260102-00000{seed}-new{seed:03d}" / "events.jsonl"
        lines = events.read_text().splitlines()
        started = json.loads(lines[0])
        started["runtime"] = bf16
        events.write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")
    doc = json.loads(fairtui_cmd("compare", *common, "--json", home=tmp_path / "home").stdout)
    (worst,) = [e for e in doc["paired"] if e["metric"] == "worst_robust"]
    (was,) = [e for e in before["paired"] if e["metric"] == "worst_robust"]
    assert worst["runtime"] == {"group": [bf16], "baseline": ["fp32"]}
    assert worst["mean"] == was["mean"] and worst["seeds"] == [0, 1, 2]  # said, not refused
    assert {g["label"]: g["runtime"] for g in doc["groups"]} == {"cpu-base": ["fp32"], "cpu-new": [bf16]}
    text = fairtui_cmd("compare", *common, home=tmp_path / "home").stdout
    assert f"trained in another runtime: {bf16} against fp32" in text
    md = fairtui_cmd("export", *common, "--format", "md", home=tmp_path / "home").stdout
    assert f"cpu-new against cpu-base: trained in another runtime: {bf16} against fp32" in md
    latex = fairtui_cmd("export", *common, "--format", "latex", home=tmp_path / "home").stdout
    assert f"% cpu-new against cpu-base: trained in another runtime: {bf16} against fp32" in latex
    rows = list(csv.DictReader(io.StringIO(fairtui_cmd("export", *common, "--format", "csv",
                                                       home=tmp_path / "home").stdout)))
    assert {r["runtime"] for r in rows if r["table"] == "paired"} == {f"{bf16} against fp32"}
    assert {r["group"]: r["runtime"] for r in rows if r["table"] == "group"} == {"cpu-base": "fp32", "cpu-new": bf16}


def test_groups_paired_with_one_baseline_carry_holm_adjusted_p(results, tmp_path):
    """Two methods against the same baseline: each metric's t-test p is also given after Holm's adjustment over the
    two (JSON, the terminal's verdict lines, Markdown's column); a single pairing's stays its own p."""
    for seed, worst in {0: 0.12, 1: 0.13, 2: 0.16}.items():
        write_run(results, "cpu-other", f"20260106-00000{seed}-oth{seed:03d}", seed, [worst, 0.4, 0.5, 0.6])
    args = ("--results", str(results), "--by", "profile", "--baseline", "cpu-base", "--checkpoint", "last")
    doc = json.loads(fairtui_cmd("compare", *args, "--json", home=tmp_path / "home").stdout)
    worst = {e["group"]: e for e in doc["paired"] if e["metric"] == "worst_robust"}
    ps = [worst["cpu-new"]["p"], worst["cpu-other"]["p"]]
    assert [worst["cpu-new"]["p_holm"], worst["cpu-other"]["p_holm"]] == pytest.approx(stats.holm(ps))
    text = " ".join(fairtui_cmd("compare", *args, home=tmp_path / "home").stdout.split())
    assert f"Holm p {worst['cpu-other']['p_holm']:.3f}" in text
    md = fairtui_cmd("export", *args, "--format", "md", home=tmp_path / "home").stdout
    assert "| p (t, Holm) |" in md
    alone = ("compare", "--results", str(results), "--group", "a=cpu-new-s0,cpu-new-s1,cpu-new-s2",
             "--group", "b=cpu-base-s0,cpu-base-s1,cpu-base-s2", "--baseline", "b")
    (single,) = [e for e in json.loads(fairtui_cmd(*alone, "--json", home=tmp_path / "home").stdout)["paired"]
                 if e["metric"] == "worst_robust"]
    assert single["p_holm"] == pytest.approx(single["p"])
    shown = " ".join(fairtui_cmd(*alone, home=tmp_path / "home").stdout.split())
    assert "Holm p" not in shown  # one pairing: nothing to adjust, and its family says so
    assert "Holm family: a alone (the home) (1 group against b)" in shown or "(1 group against b)" in shown


def test_a_committed_tables_holm_family_does_not_move_with_a_users_own_runs(results, tmp_path):
    """STATS.md: the family is declared. The groups of one --results folder are one family (the table they were
    committed as); a group of the home's runs is its own, so adding one leaves the committed adjusted p as it was,
    unless --family all asks for one family of everything."""
    for seed, worst in {0: 0.12, 1: 0.13, 2: 0.16}.items():
        write_run(results, "cpu-other", f"20260106-00000{seed}-oth{seed:03d}", seed, [worst, 0.4, 0.5, 0.6])
    args = ("compare", "--results", str(results), "--by", "profile", "--baseline", "cpu-base", "--checkpoint", "last",
            "--json")
    home = tmp_path / "home"
    before = {e["group"]: e for e in json.loads(fairtui_cmd(*args, home=home).stdout)["paired"]
              if e["metric"] == "worst_robust"}
    for seed, worst in {0: 0.30, 1: 0.31, 2: 0.33}.items():  # a user's own variant, a strong one, in the home
        write_run(home, "runs", f"20261201-00000{seed}-mine{seed:02d}", seed, [worst, 0.4, 0.5, 0.6])
        run = home / "runs" / f"20261201-00000{seed}-mine{seed:02d}"
        started = json.loads((run / "events.jsonl").read_text().splitlines()[0])
        assert started["config"]["name"] == "runs"
    after = {e["group"]: e for e in json.loads(fairtui_cmd(*args, home=home).stdout)["paired"]
             if e["metric"] == "worst_robust"}
    assert "runs" in after, "the home's runs formed a group"
    for label in ("cpu-new", "cpu-other"):
        assert after[label]["p_holm"] == before[label]["p_holm"]  # the table's family, unmoved
        assert after[label]["holm_family"]["groups"] == ["cpu-new", "cpu-other"]
        assert after[label]["holm_family"]["name"] == f"{results} (committed)"
    assert after["runs"]["p_holm"] == after["runs"]["p"] and after["runs"]["holm_family"]["groups"] == ["runs"]
    assert after["runs"]["holm_family"]["name"] == "runs alone (the home)"
    every = {e["group"]: e for e in json.loads(fairtui_cmd(*args, "--family", "all", home=home).stdout)["paired"]
             if e["metric"] == "worst_robust"}
    ps = [every[g]["p"] for g in ("cpu-new", "cpu-other", "runs")]
    assert [every[g]["p_holm"] for g in ("cpu-new", "cpu-other", "runs")] == pytest.approx(stats.holm(ps))
    # the average is the secondary metric, adjusted in the same family on its own, and says so
    (avg,) = [e for e in json.loads(fairtui_cmd(*args, home=home).stdout)["paired"]
              if e["metric"] == "avg_robust" and e["group"] == "cpu-new"]
    assert avg["holm_family"]["role"] == "secondary" and before["cpu-new"]["holm_family"]["role"] == "primary"


def test_the_standardised_effect_by_hand_and_by_its_defining_property():
    """d_z = mean / sd of the differences: 1, 2, 3 points give 2 exactly; its 95% interval is where the noncentral t
    of t = d_z sqrt(n) puts the observed t at the 97.5% and 2.5% points."""
    from scipy import stats as sp

    dz, lo, hi = stats.cohen_dz([0.01, 0.02, 0.03])
    assert dz == pytest.approx(2.0, abs=1e-12)
    t = 2.0 * math.sqrt(3)
    assert float(sp.nct.cdf(t, 2, lo * math.sqrt(3))) == pytest.approx(0.975, abs=1e-9)
    assert float(sp.nct.cdf(t, 2, hi * math.sqrt(3))) == pytest.approx(0.025, abs=1e-9)
    assert lo < dz < hi
    assert all(math.isnan(x) for x in stats.cohen_dz([0.01, 0.01]))  # no spread: no d_z
    assert all(math.isnan(x) for x in stats.cohen_dz([0.01]))


def test_the_terminal_table_fits_80_columns(results, tmp_path):
    out = fairtui_cmd("compare", "--results", str(results), "--by", "profile", "--baseline", "cpu-base",
                      home=tmp_path / "home", env_extra={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert "better" in out.stdout and "dropped: seeds 3, 4" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80


def test_many_second_runs_of_a_seed_are_counted_in_the_text_and_listed_in_the_json(results, tmp_path):
    """A seed run again and again (eight reruns of seed 0): the group keeps its first run of the seed, the text
    names four of the eight left out and counts the other four, and --json lists all eight."""
    reruns = [write_run(results, "cpu-base", f"20260103-00000{i}-again{i}", 0, [0.9, 0.9, 0.9, 0.9]).name
              for i in range(8)]
    args = ("compare", "--results", str(results), "--by", "profile", "--baseline", "cpu-base")
    out = fairtui_cmd(*args, home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # the report wraps at 80 columns
    assert text.count("left out of cpu-base:") == 5 and text.count("a second run of seed 0") == 4
    assert "left out of cpu-base: 4 more runs (--json lists them all)" in text
    doc = json.loads(fairtui_cmd(*args, "--json", home=tmp_path / "home").stdout)
    (base,) = [g for g in doc["groups"] if g["label"] == "cpu-base"]
    assert sorted(r for r in reruns if any(r in line for line in base["left_out"])) == sorted(reruns)
    assert base["runs"][0] == "20260101-000000-base00"  # the first run of seed 0 stays the group's


def test_groups_whose_protocols_differ_are_not_paired(results, tmp_path):
    write_run(results, "digits-new", "20260103-000000-dig000", 0, [0.3] * 4, dataset="digits")
    write_run(results, "cpu-eps8", "20260103-000001-eps000", 0, [0.3] * 4, eps=8 / 255)
    # a protocol whose headline is a fixed part of the test split (the quick protocol's) against the whole split's
    write_run(results, "cpu-part", "20260103-000002-part00", 0, [0.3] * 4, test_per_class=200)
    out = fairtui_cmd("compare", "--results", str(results), "--by", "profile", "--baseline", "cpu-base", "--json",
                      home=tmp_path / "home")
    doc = json.loads(out.stdout)
    assert {e["group"] for e in doc["paired"]} == {"cpu-new"}
    reasons = {e["group"]: e["reason"] for e in doc["not_paired"]}
    assert reasons["digits-new"].startswith("dataset differs (digits against cifar10)")
    assert reasons["cpu-eps8"].startswith("eps differs")
    assert reasons["cpu-part"].startswith("test part (images a class) differs (200 against whole split)")


def test_explicit_groups_and_a_fine_tune_paired_with_the_runs_it_started_from(results, tmp_path):
    """--group names runs by id; a fine-tune whose runs name their starting runs (method.init_from) is paired with
    those, found among the baseline's runs or --bases, even where the seeds differ."""
    bases = tmp_path / "bases"
    own = write_run(bases, "cpu-base", "20260104-000000-retr00", 1, [0.30, 0.4, 0.5, 0.6])  # seed 1, retrained
    write_run(results, "cpu-ft", "20260105-000000-ft0000", 0, [0.20, 0.4, 0.5, 0.6],
              init_from="/somewhere/runs/20260101-000000-base00/checkpoints/best.pt", method="faal")
    write_run(results, "cpu-ft", "20260105-000001-ft0001", 1, [0.35, 0.4, 0.5, 0.6],
              init_from=f"/elsewhere/runs/{own.name}", method="faal")
    out = fairtui_cmd("compare", "--results", str(results), "--bases", str(bases), "--by", "profile",
                      "--baseline", "cpu-base", "--method", "faal", "--json", home=tmp_path / "home")
    assert out.returncode == 2 and "is not a group" in out.stderr  # --method faal leaves no baseline group
    out = fairtui_cmd("compare", "--results", str(results), "--bases", str(bases), "--by", "profile",
                      "--baseline", "cpu-base", "--json", home=tmp_path / "home")
    (ft,) = [e for e in json.loads(out.stdout)["paired"] if e["group"] == "cpu-ft" and e["metric"] == "worst_robust"]
    assert ft["pairing"] == "init_from" and ft["dropped_seeds"] == []
    assert ft["differences"] == pytest.approx([0.20 - 0.10, 0.35 - 0.30])  # seed 1 against its own base, not the row's
    out = fairtui_cmd("compare", "--results", str(results), "--group", "mine=20260102-000000-new000,cpu-new-s1",
                      "--group", "theirs=20260101-000000-base00,20260101-000001-base01", "--baseline", "theirs",
                      "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    (mine,) = [e for e in json.loads(out.stdout)["paired"] if e["metric"] == "worst_robust"]
    assert mine["group"] == "mine" and mine["n"] == 2 and mine["differences"] == pytest.approx([0.05, 0.03])


def test_a_fine_tune_whose_other_starts_are_not_at_hand_says_so_and_pairs_by_seed(results, tmp_path):
    """CSR's committed seeds: seed 0 started from the baseline's own run, seed 1 from one retrained elsewhere. Without
    --bases the fine-tune is paired by seed (seed 1 with a run it did not start from), and every output says which
    seeds' starts are missing; with --bases it is paired with its starts and says nothing."""
    bases = tmp_path / "bases"
    own = write_run(bases, "cpu-base", "20260104-000000-retr00", 1, [0.30, 0.4, 0.5, 0.6])
    write_run(results, "cpu-ft", "20260105-000000-ft0000", 0, [0.20, 0.4, 0.5, 0.6],
              init_from="/somewhere/runs/20260101-000000-base00", method="csr")
    write_run(results, "cpu-ft", "20260105-000001-ft0001", 1, [0.35, 0.4, 0.5, 0.6],
              init_from=f"/elsewhere/runs/{own.name}", method="csr")
    args = ("--results", str(results), "--by", "profile", "--baseline", "cpu-base")
    doc = json.loads(fairtui_cmd("compare", *args, "--json", home=tmp_path / "home").stdout)
    (ft,) = [e for e in doc["paired"] if e["group"] == "cpu-ft" and e["metric"] == "worst_robust"]
    assert ft["pairing"] == "seed" and ft["bases_missing"] == [1]
    assert ft["differences"] == pytest.approx([0.20 - 0.10, 0.35 - 0.14])  # seed 1 against the row's seed 1
    (new,) = [e for e in doc["paired"] if e["group"] == "cpu-new" and e["metric"] == "worst_robust"]
    assert new["bases_missing"] == []  # not a fine-tune: nothing to say
    text = fairtui_cmd("compare", *args, home=tmp_path / "home").stdout
    assert "the runs seed 1 started from are not at hand: give --bases DIR" in text
    md = fairtui_cmd("export", *args, "--format", "md", home=tmp_path / "home").stdout
    assert "cpu-ft is paired by seed: the runs seed 1 started from are not at hand" in md
    doc = json.loads(fairtui_cmd("compare", *args, "--bases", str(bases), "--json", home=tmp_path / "home").stdout)
    (ft,) = [e for e in doc["paired"] if e["group"] == "cpu-ft" and e["metric"] == "worst_robust"]
    assert ft["pairing"] == "init_from" and ft["bases_missing"] == []
    assert ft["differences"] == pytest.approx([0.20 - 0.10, 0.35 - 0.30])
    # #88: --bases given, the start not in it: the fix is not "give --bases", the start is in neither place
    elsewhere = tmp_path / "other-bases"
    write_run(elsewhere, "cpu-base", "20260104-000000-other0", 1, [0.30, 0.4, 0.5, 0.6])
    text = fairtui_cmd("compare", *args, "--bases", str(elsewhere), home=tmp_path / "home").stdout
    assert "the runs seed 1 started from are in neither this home nor the --bases folders" in text, text
    assert "give --bases" not in text


def test_against_start_with_a_start_deleted_names_it_and_pairs_only_the_others(tmp_path):
    """#88 item 6: --against-start with a fine-tune's base run deleted (and retrained under another id) paired by seed
    with the wrong run and called it "paired by seed"; with every base deleted it said "nothing paired" without
    naming them. Each run whose start is not at hand is left out, its start named; the others pair with theirs."""
    root = tmp_path / "results"
    for seed in (0, 1):
        write_run(root, "cpu-base", f"20260101-00000{seed}-base{seed:02d}", seed, [0.2, 0.4, 0.5, 0.6])
        write_run(root, "cpu-ft", f"20260105-00000{seed}-ft{seed:04d}", seed, [0.3, 0.4, 0.5, 0.6], method="faal",
                  init_from=f"/x/runs/20260101-00000{seed}-base{seed:02d}")
    shutil.rmtree(root / "cpu-base" / "20260101-000001-base01")
    write_run(root, "cpu-base", "20260101-000009-base09", 1, [0.1, 0.4, 0.5, 0.6])  # seed 1 retrained
    args = ("compare", "--results", str(root), "--by", "profile", "--baseline", "cpu-base", "--against-start")
    text = fairtui_cmd(*args, home=tmp_path / "home").stdout
    assert "paired each run with the checkpoint it started from: seeds 0\n" in text, text
    assert "cpu-ft-s1 [20260105-000001-ft0001]: the run it started from, 20260101-000001-base01, is not at hand" in " ".join(
        text.split()), text
    shutil.rmtree(root / "cpu-base" / "20260101-000000-base00")
    write_run(root, "cpu-base", "20260101-000008-base08", 0, [0.1, 0.4, 0.5, 0.6])
    text = " ".join(fairtui_cmd(*args, home=tmp_path / "home").stdout.split())
    assert "cpu-ft against cpu-base: nothing paired" in text, text
    assert "the run it started from, 20260101-000000-base00, is not at hand" in text
    assert "the run it started from, 20260101-000001-base01, is not at hand" in text


def test_against_start_pairs_each_fine_tune_run_with_the_checkpoint_it_loaded(tmp_path):
    """FAAL's committed seeds start from PGD-AT's best checkpoint, whose worst class is above its last one: paired at
    --checkpoint last, the fine-tune's gain holds the base's own best-to-last drop. --against-start pairs each run
    with the checkpoint it started from: the one the engine recorded (its epoch checked against the base's result),
    or, for runs made before the record, the best checkpoint init_from's run folder gives."""
    root, home = tmp_path / "results", tmp_path / "home"
    base_best = {0: 0.20, 1: 0.24, 2: 0.30}  # worst class at best (epoch 7); the last (epoch 10) is 0.10 lower
    for seed, worst in base_best.items():
        write_run(root, "cpu-base", f"20260101-00000{seed}-base{seed:02d}", seed, [worst - 0.10, 0.4, 0.5, 0.6],
                  best=[worst, 0.4, 0.5, 0.6], epochs=(7, 10))
    ft_last = {0: 0.25, 1: 0.26, 2: 0.36}
    for seed, worst in ft_last.items():
        base = f"20260101-00000{seed}-base{seed:02d}"
        init = {"from": base, "file": f"/h/runs/{base}/checkpoints/best.pt", "sha256": "0" * 64, "run_id": base,
                "checkpoint": "best", "epoch": 9 if seed == 2 else 7}  # seed 2's start moved: epoch 9, not 7
        write_run(root, "cpu-ft", f"20260105-00000{seed}-ft{seed:04d}", seed, [worst, 0.4, 0.5, 0.6],
                  init_from=f"/h/runs/{base}", method="faal", init=None if seed == 1 else init)
    args = ("compare", "--results", str(root), "--by", "profile", "--baseline", "cpu-base", "--checkpoint", "last")
    same = json.loads(fairtui_cmd(*args, "--json", home=home).stdout)
    (ft,) = [e for e in same["paired"] if e["metric"] == "worst_robust"]
    assert ft["against"] == "checkpoint" and ft["differences"] == pytest.approx([0.15, 0.12, 0.16])  # last - last
    doc = json.loads(fairtui_cmd(*args, "--against-start", "--json", home=home).stdout)
    (ft,) = [e for e in doc["paired"] if e["metric"] == "worst_robust"]
    assert ft["against"] == "start" and ft["seeds"] == [0, 1]
    assert ft["differences"] == pytest.approx([0.25 - 0.20, 0.26 - 0.24])  # the fine-tune's last - the base's best
    assert [(st["checkpoint"], st["epoch"], st["recorded"]) for st in ft["starts"]] == [("best", 7, True),
                                                                                      ("best", None, False)]
    assert len(ft["starts_left_out"]) == 1 and "started from epoch 9" in ft["starts_left_out"][0]
    assert "whose best result is of epoch 7" in ft["starts_left_out"][0]
    text = " ".join(fairtui_cmd(*args, "--against-start", home=home).stdout.split())
    assert "paired each run with the checkpoint it started from: seeds 0, 1" in text
    assert "cpu-base at best (inferred from method.init_from for seed 1; no epoch recorded)" in text
    md = fairtui_cmd("export", *args[1:], "--against-start", "--format", "md", home=home).stdout
    assert "cpu-ft is paired with the checkpoints its runs started from (cpu-base at best" in md
    assert "not with cpu-base at last; left out: cpu-ft-s2" in md
    latex = fairtui_cmd("export", *args[1:], "--against-start", "--format", "latex", home=home).stdout
    assert "% cpu-ft is paired with the checkpoints its runs started from" in latex
    shown = " ".join(fairtui_cmd("show", "--results", str(root), "cpu-ft-s1", home=home).stdout.split())
    assert "fine-tuned from /h/runs/20260101-000001-base01 (its best checkpoint, by the engine's rule" in shown
    shown = " ".join(fairtui_cmd("show", "--results", str(root), "cpu-ft-s0", home=home).stdout.split())
    assert "fine-tuned from run 20260101-000000-base00's best checkpoint (epoch 7); sha256 0000000000000000" in shown
    pytest.importorskip("matplotlib")
    forest = fairtui_cmd("plot", "forest", *args[1:], "--against-start", "-o", str(tmp_path / "f.svg"), home=home)
    assert forest.returncode == 0, forest.stderr
    assert "cpu-ft against the" in (tmp_path / "f.svg").read_text()  # the caption, wrapped
    refused = fairtui_cmd("compare", "--results", str(root), "--by", "profile", "--against-start", home=home)
    assert refused.returncode == 2 and "give --baseline" in refused.stderr


def test_bad_group_input_is_one_line(results, tmp_path):
    for args, says in ((["--group", "nolabel"], "LABEL=RUN"), (["--by", "colour"], "--by must be one of"),
                       (["--results", str(tmp_path / "missing"), "--by", "profile"], "no such folder"),
                       (["--by", "profile", "--baseline", "nope"], "is not a group")):
        out = fairtui_cmd("compare", "--results", str(results), *args, home=tmp_path / "home")
        assert out.returncode == 2, (args, out.stderr)
        assert says in out.stderr and "Traceback" not in out.stderr


def test_export_writes_the_groups_and_paired_differences_in_every_format(results, tmp_path):
    import csv
    import io

    common = ["--results", str(results), "--by", "profile", "--baseline", "cpu-base", "--checkpoint", "last"]
    md = fairtui_cmd("export", *common, "--format", "md", home=tmp_path / "home")
    assert md.returncode == 0, md.stderr
    assert "| cpu-new | cpu-base | worst | 3 | +4.7 | [+0.9, +8.5] |" in md.stdout
    assert "pgd20, eps 4/255, whole split @ last" in md.stdout
    rows = list(csv.DictReader(io.StringIO(fairtui_cmd("export", *common, "--format", "csv",
                                                       home=tmp_path / "home").stdout)))
    (worst,) = [r for r in rows if r["table"] == "paired" and r["metric"] == "worst_robust"]
    assert float(worst["mean"]) == pytest.approx(0.14 / 3, rel=1e-5) and worst["dropped_seeds"] == "3, 4"
    latex = fairtui_cmd("export", *common, "--format", "latex", home=tmp_path / "home").stdout
    assert r"\begin{tabular}" in latex and r"$\pm$" in latex and "cpu-new & cpu-base & worst" in latex


def test_plot_forest_draws_one_row_per_paired_group(results, tmp_path):
    pytest.importorskip("matplotlib")
    out = fairtui_cmd("plot", "forest", "--results", str(results), "--by", "profile", "--baseline", "cpu-base",
                      "-o", str(tmp_path / "forest.svg"), home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    svg = (tmp_path / "forest.svg").read_text()
    assert 'id="mean-worst_robust-0"' in svg and 'id="ci-avg_robust-0"' in svg and "cpu-new (n=3)" in svg
    missing = fairtui_cmd("plot", "forest", "--results", str(results), "--by", "profile", "-o",
                          str(tmp_path / "f.svg"), home=tmp_path / "home")
    assert missing.returncode == 2 and "--baseline" in missing.stderr


def test_show_reads_a_committed_run_by_name_or_id(results, tmp_path):
    before = folder_digest(results)
    out = fairtui_cmd("show", "cpu-new-s3", "--results", str(results), "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["run_id"] == "20260102-000003-new003"
    out = fairtui_cmd("show", "20260101-000004", "--results", str(results), home=tmp_path / "home")
    assert out.returncode == 0 and "cpu-base-s4" in out.stdout
    assert folder_digest(results) == before


def test_compare_warns_when_runs_of_one_profile_and_seed_ran_on_other_data_or_cpus(results, tmp_path):
    def stamp(run_dir, data, model):
        lines = (run_dir / "events.jsonl").read_text().splitlines()
        started = json.loads(lines[0])
        started["data_fingerprint"] = {"train": data, "val": "v", "test": "t"}
        started["provenance"] = {"cpu": {"model": model, "flags": ["avx2"]}}
        (run_dir / "events.jsonl").write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")

    first = results / "cpu-base" / "20260101-000000-base00"
    again = write_run(tmp_path / "other", "cpu-base", "20260109-000000-again0", 0, [0.1, 0.4, 0.5, 0.6])
    stamp(first, "aaaa", "EPYC")
    stamp(again, "bbbb", "EPYC")
    out = fairtui_cmd("compare", "--results", str(results), "--results", str(tmp_path / "other"), "--group",
                      "x=20260101-000000-base00,20260109-000000-again0", home=tmp_path / "home")
    assert "on different data: their numbers are not expected to match" in out.stderr
    stamp(again, "aaaa", "Xeon")
    out = fairtui_cmd("compare", "--results", str(results), "--results", str(tmp_path / "other"), "--group",
                      "x=20260101-000000-base00,20260109-000000-again0", home=tmp_path / "home")
    assert "on different CPU" in out.stderr and "different data" not in out.stderr
    out = fairtui_cmd("compare", "--results", str(results), "--results", str(tmp_path / "other"), "--by", "profile",
                      "--baseline", "cpu-base", home=tmp_path / "home")  # its groups are the configurations
    assert out.stderr.count("on different CPU") == 1 and "20260109-000000-again0" in out.stderr
    shown = fairtui_cmd("show", "20260109-000000-again0", "--results", str(tmp_path / "other"), home=tmp_path / "home")
    assert "provenance: data aaaa/v/t (train/val/test); cpu Xeon (avx2)" in shown.stdout.replace("\n", " ")


HOSTILE = "\\input{/etc/passwd}\\immediate\\write18{id} |x| =cmd [bold]\x1b]0;pwned\x07"


def test_a_hostile_profile_name_is_text_in_every_format(tmp_path):
    """A profile name is data: LaTeX gets no command of it, Markdown no extra cell, CSV no formula, the terminal no
    escape sequence and no Rich markup."""
    import csv
    import io

    root = tmp_path / "results"
    for seed in (0, 1):
        write_run(root, "base", f"20260101-00000{seed}-base{seed:02d}", seed, [0.1 + seed / 100, 0.4, 0.5, 0.6])
        write_run(root, "evil", f"20260102-00000{seed}-evil{seed:02d}", seed, [0.2 + seed / 50, 0.4, 0.5, 0.6])
        for run in (root / "evil").iterdir():  # the run's resolved profile names it so
            lines = (run / "events.jsonl").read_text().splitlines()
            started = json.loads(lines[0])
            started["config"]["name"] = HOSTILE
            (run / "events.jsonl").write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")
    common = ["--results", str(root), "--by", "profile", "--baseline", "base"]
    latex = fairtui_cmd("export", *common, "--format", "latex", home=tmp_path / "home").stdout
    assert "\\input{" not in latex and "\\write18" not in latex and r"\textbackslash{}input\{" in latex
    md = fairtui_cmd("export", *common, "--format", "md", home=tmp_path / "home").stdout
    evil_rows = [line for line in md.splitlines() if "input" in line and line.startswith("|")]
    import re

    cells_of = lambda line: len(re.findall(r"(?<!\\)\|", line)) - 1  # noqa: E731 (unescaped pipes)
    assert evil_rows and {cells_of(line) for line in evil_rows} == {5, 7, 14}  # the per-class, group and paired tables
    cells = list(csv.reader(io.StringIO(fairtui_cmd("export", *common, "--format", "csv", home=tmp_path / "home").stdout)))
    assert all(not c.startswith(("=", "+", "@")) for row in cells for c in row)
    shown = fairtui_cmd("compare", *common, home=tmp_path / "home", env_extra={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "\x1b]" not in shown.stdout and "\x07" not in shown.stdout and "\\x1b" in shown.stdout


def test_an_output_is_never_written_through_a_planted_link(results, tmp_path):
    """export -o and plot -o write a temporary file beside the target: created exclusively under an unpredictable
    name, a link planted where the old fixed name was cannot redirect the write."""
    out_dir = tmp_path / "shared"
    out_dir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out_dir / ".table.md.fairtui-tmp").symlink_to(victim)
    out = fairtui_cmd("export", "--results", str(results), "--by", "profile", "--format", "md", "-o",
                      str(out_dir / "table.md"), home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert victim.read_text() == "precious"
    target = out_dir / "table.md"
    assert target.is_file() and not target.is_symlink() and "cpu-new" in target.read_text()
    assert sorted(p.name for p in out_dir.iterdir()) == [".table.md.fairtui-tmp", "table.md"]  # nothing left over


def test_a_hostile_run_name_is_text_in_a_run_export(tmp_path):
    from fairtui.runs.synthetic import make_run

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name=HOSTILE)
    for fmt, forbidden in (("latex", "\\input{"), ("md", "\x1b"), ("csv", "\n=cmd")):
        out = fairtui_cmd("export", "20260101-000000-aaaaaa", "--format", fmt, home=home)
        assert out.returncode == 0, out.stderr
        assert forbidden not in out.stdout and "\x07" not in out.stdout, fmt


def test_a_non_finite_result_is_left_out_and_named_in_every_format(results, tmp_path):
    """A committed run whose headline result holds a NaN (a damaged or hand-edited stream) is data, not a crash:
    every group command leaves it out of its group and names it with the class, in every format."""
    write_run(results, "cpu-new", "20260102-000009-nan009", 9, [float("nan"), 0.4, 0.5, 0.5])
    write_run(results, "cpu-base", "20260101-000009-nan009", 9, [0.3, 0.4, float("inf"), 0.5])
    home = tmp_path / "home"
    args = ("--results", str(results), "--by", "profile", "--baseline", "cpu-base")
    text = fairtui_cmd("compare", *args, home=home, env_extra={"COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    assert "a non-finite result at best (robust accuracy of class 0 is nan)" in " ".join(text.stdout.split())
    doc = json.loads(fairtui_cmd("compare", *args, "--json", home=home).stdout)
    left = {line for g in doc["groups"] for line in g["left_out"]}
    assert any("20260101-000009-nan009" in line and "class 2 is inf" in line for line in left)
    for fmt in ("md", "csv", "latex", "json"):
        out = fairtui_cmd("export", *args, "--format", fmt, home=home)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (fmt, out.stderr[-500:])
        assert "20260102-000009-nan009" in out.stdout + out.stderr, fmt
    plot = fairtui_cmd("plot", "forest", *args, "-o", str(tmp_path / "f.png"), home=home)
    assert plot.returncode == 0, plot.stderr[-500:]
    assert "20260102-000009-nan009" in plot.stdout + plot.stderr


def test_committed_runs_that_cannot_be_read_are_named_with_the_reason_in_every_output(results, tmp_path):
    """The probe's folder: one stream cut at 60%, one emptied, one run without profile.toml, a group whose only
    run is cut. Each is named, with its reason, in the terminal, JSON, md, csv, LaTeX and the forest's stderr; no
    group shrinks unsaid, and the files are only read."""
    cut = write_run(results, "cpu-new", "20260102-000007-cut007", 7, [0.2, 0.4, 0.5, 0.5]) / "events.jsonl"
    cut.write_bytes(cut.read_bytes()[:len(cut.read_bytes()) * 6 // 10])
    (write_run(results, "cpu-base", "20260101-000008-empty8", 8, [0.2] * 4) / "events.jsonl").write_bytes(b"")
    (write_run(results, "cpu-base", "20260101-000009-noprof", 9, [0.2] * 4) / "profile.toml").unlink()
    alone = write_run(results, "cpu-lone", "20260104-000000-lone00", 0, [0.2] * 4) / "events.jsonl"
    alone.write_text(alone.read_text().splitlines()[0] + "\n")  # started, never finished
    before = folder_digest(results)
    expected = {"20260102-000007-cut007": "ends before the run did", "20260101-000008-empty8": "is empty",
                "20260101-000009-noprof": "no readable profile.toml", "20260104-000000-lone00": "ends before the run did"}
    home = tmp_path / "home"
    args = ("--results", str(results), "--by", "profile", "--baseline", "cpu-base")

    def named(text):
        flat = " ".join(text.split())
        return {run for run, why in expected.items()
                if any(run in line and why in line for line in flat.split("left out of --results:"))}

    out = fairtui_cmd("compare", *args, home=home, env_extra={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert named(out.stdout) == set(expected)
    doc = json.loads(fairtui_cmd("compare", *args, "--json", home=home).stdout)
    assert named("\n".join(doc["left_out"])) == set(expected)
    for fmt in ("md", "csv", "latex", "json"):
        text = fairtui_cmd("export", *args, "--format", fmt, home=home)
        assert text.returncode == 0, (fmt, text.stderr[-500:])
        assert named(text.stdout) == set(expected), fmt
    plot = fairtui_cmd("plot", "forest", *args, "-o", str(tmp_path / "f.png"), home=home)
    assert plot.returncode == 0 and named(plot.stderr) == set(expected), plot.stderr[-500:]
    assert folder_digest(results) == before


def test_a_group_whose_every_run_is_left_out_is_named_not_dropped(results, tmp_path):
    write_run(results, "cpu-nan", "20260105-000000-nan000", 0, [float("nan"), 0.4, 0.5, 0.5])
    doc = json.loads(fairtui_cmd("compare", "--results", str(results), "--by", "profile", "--baseline", "cpu-base",
                                 "--json", home=tmp_path / "home").stdout)
    assert "cpu-nan" not in [g["label"] for g in doc["groups"]]
    assert any("left out of cpu-nan: " in line and "20260105-000000-nan000" in line and "class 0 is nan" in line
               for line in doc["left_out"])
    assert "cpu-nan: every run left out, so the group is not in the tables" in doc["left_out"]


# -- the protocol check: the training budget ----------------------------------------------------------------------

def test_a_shorter_training_budget_is_refused_in_one_line_naming_train_epochs_unless_allowed(tmp_path):
    """A 5-epoch variant of a profile against the committed 30-epoch runs: not paired, the reason naming the key to
    --set; paired with --allow-protocol-difference, every output naming the difference. Relative milestones are
    compared as the epochs they resolve to."""
    root = tmp_path / "results"
    for seed in range(3):
        write_run(root, "base", f"2026010{seed}-000000-base0{seed}", seed, [0.2, 0.4, 0.5, 0.6])
        write_run(root, "short", f"2026010{seed}-000001-shrt0{seed}", seed, [0.25 + seed / 100, 0.4, 0.5, 0.6],
                  train={"epochs": 5, "lr": 0.05, "schedule": "piecewise", "milestones": ["75%"]})
        write_run(root, "same", f"2026010{seed}-000002-same0{seed}", seed, [0.22 + seed / 100, 0.4, 0.5, 0.6],
                  train={"epochs": 30, "lr": 0.05, "schedule": "piecewise", "milestones": [23]})  # 75% of 30
    common = ["--results", str(root), "--by", "profile", "--baseline", "base"]
    out = json.loads(fairtui_cmd("compare", *common, "--json", home=tmp_path / "home").stdout)
    assert {e["group"] for e in out["paired"]} == {"same"}
    (refused,) = out["not_paired"]
    assert refused["group"] == "short" and "\n" not in refused["reason"]
    assert refused["reason"].startswith("train.epochs differs (5 against 30); train.lr schedule differs")
    assert "--allow-protocol-difference" in refused["reason"]
    shown = fairtui_cmd("compare", *common, home=tmp_path / "home", env_extra={"COLUMNS": "80"})
    assert "short against base: not paired, train.epochs differs (5 against 30)" in " ".join(shown.stdout.split())
    allowed = [*common, "--allow-protocol-difference"]
    out = json.loads(fairtui_cmd("compare", *allowed, "--json", home=tmp_path / "home").stdout)
    short = next(e for e in out["paired"] if e["group"] == "short")
    assert short["protocol_differences"][0] == "train.epochs differs (5 against 30)"
    for fmt in ("md", "csv", "latex"):
        text = fairtui_cmd("export", *allowed, "--format", fmt, home=tmp_path / "home").stdout
        assert "train.epochs differs (5 against 30)" in text, fmt
    shown = fairtui_cmd("compare", *allowed, home=tmp_path / "home", env_extra={"COLUMNS": "80"}).stdout
    assert "protocol: train.epochs differs (5 against 30) (allowed)" in " ".join(shown.split())


def test_the_measurement_is_never_paired_across_and_a_fine_tunes_schedule_is_its_own(tmp_path):
    root = tmp_path / "results"
    for seed in range(2):
        write_run(root, "base", f"2026010{seed}-000000-base0{seed}", seed, [0.2, 0.4, 0.5, 0.6])
        write_run(root, "loose", f"2026010{seed}-000001-loos0{seed}", seed, [0.2, 0.4, 0.5, 0.6], eps=8 / 255)
        # a fine-tune of 2 epochs at a constant rate (its starts not at hand: paired by seed) is not refused for its
        # schedule, which continues its base's; its training attack is compared
        write_run(root, "ft", f"2026010{seed}-000002-ftun0{seed}", seed, [0.3, 0.4, 0.5, 0.6],
                  init_from=f"/elsewhere/runs/base{seed}", train={"epochs": 2, "lr": 0.001, "schedule": "constant"})
    out = json.loads(fairtui_cmd("compare", "--results", str(root), "--by", "profile", "--baseline", "base",
                                 "--allow-protocol-difference", "--json", home=tmp_path / "home").stdout)
    reasons = {e["group"]: e["reason"] for e in out["not_paired"]}
    assert set(reasons) == {"loose"} and reasons["loose"].startswith("eps differs")
    ft = next(e for e in out["paired"] if e["group"] == "ft" and e["metric"] == "worst_robust")
    assert ft["protocol_differences"] == [] and ft["n"] == 2


def test_a_pairing_with_every_pair_left_out_says_why_not_seeds_and_dashes():
    """#71 item 8: `compare --against-start` with the fine-tunes' base deleted printed "seeds ;" and dashes."""
    from fairtui.judge.group_report import pairing_lines
    from fairtui.judge.groups import Pairing

    gone = Pairing("faal", "at", against="start", starts_left_out=["faal-s0 [r0]: no start recorded"])
    gone.results = {m: stats.paired([]) for m in ("worst_robust", "avg_robust")}
    assert pairing_lines(gone) == ["faal against at: nothing paired", "  left out: faal-s0 [r0]: no start recorded"]
    missing = Pairing("faal", "at", bases_missing=[0, 1])
    assert pairing_lines(missing)[1] == "  left out: the runs seeds 0, 1 started from are not at hand"


def test_per_class_means_carry_their_interval_across_seeds(results, tmp_path):
    """The group tables' per-class robust accuracy: each class's mean over the seeds with its 95% t-interval, by hand
    for cpu-base's first class (BASE_WORST over three seeds)."""
    args = ("compare", "--results", str(results), "--by", "profile", "--baseline", "cpu-base", "--checkpoint", "last")
    doc = json.loads(fairtui_cmd(*args, "--json", home=tmp_path / "home").stdout)
    (base,) = [g for g in doc["groups"] if g["label"] == "cpu-base"]
    values = list(BASE_WORST.values())
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    from scipy import stats as sp

    half = sp.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))
    assert base["robust_acc_per_class_mean"][0] == pytest.approx(mean)
    assert base["robust_acc_per_class_ci95"][0] == pytest.approx([mean - half, mean + half])
    assert base["robust_acc_per_class_ci95"][1] == [None, None]  # every seed 0.4: no spread, no t-interval
    md = fairtui_cmd("export", *args[1:], "--format", "md", home=tmp_path / "home").stdout
    assert "Per-class robust accuracy (mean ± 95% t half-width over seeds, %):" in md
    assert f"| cpu-base | {100 * mean:.1f} ± {100 * half:.1f} | 40.0 |" in md


def test_a_refusal_writes_eps_and_steps_as_profiles_do():
    """#88 item 3: eps in refusals as decimals (0.015686) where profiles say 4/255."""
    from fairtui.judge.protocol import planned_differences

    a = {"data": {"dataset": "cifar10"}, "eval": {"attacks": ["pgd20"], "eps": 4 / 255},
         "attack": {"eps": 4 / 255, "step": 0.007, "steps": 3}, "train": {"epochs": 6}}
    b = {"data": {"dataset": "cifar10"}, "eval": {"attacks": ["pgd20"], "eps": 8 / 255},
         "attack": {"eps": 8 / 255, "step": 2 / 255, "steps": 3}, "train": {"epochs": 6}}
    lines = planned_differences(a, b)
    assert "eval.eps differs (4/255 against 8/255)" in lines
    assert "attack.step differs (0.007 against 2/255)" in lines and "attack.eps differs (4/255 against 8/255)" in lines
