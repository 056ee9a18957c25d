"""The fairness table is generated from committed run files alone, and its numbers are the runs' own."""

import json
import re
import statistics
from pathlib import Path

import pytest

from experiments.fairness_table import interval, markdown, replace_block
from tests.conftest import ROOT

EXAMPLE = ROOT / "tests" / "data" / "results-example"  # two real digits PGD-AT runs' small files (3 epochs)


def headline(run_dir: Path, checkpoint: str) -> dict:
    """The run's test PGD-20 result at ``checkpoint``, read straight from its events.jsonl."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    (result,) = [e for e in events if e["type"] == "eval_result" and e["split"] == "test"
                 and e["checkpoint"] == checkpoint and e["attack"] == "pgd20" and not e.get("n_per_class")]
    return result


def test_a_row_is_the_mean_and_interval_of_its_runs_own_events():
    runs = sorted((EXAMPLE / "digits-at").iterdir())
    assert len(runs) == 2
    table = markdown(EXAMPLE)
    for checkpoint in ("best", "last"):
        row = next(line for line in table.splitlines() if line.startswith(f"| PGD-AT | digits-at | 2 | {checkpoint} |"))
        cells = [c.strip() for c in row.split("|")[1:-1]]
        values = [headline(r, checkpoint)["avg_robust"] for r in runs]
        mean, half = statistics.mean(values), 12.7062047 * statistics.stdev(values) / 2 ** 0.5  # t_{0.975, 1}
        assert cells[5] == f"{mean * 100:.1f} ± {half * 100:.1f}"
        worst = [headline(r, checkpoint)["worst_robust"] for r in runs]
        assert cells[6].startswith(f"{statistics.mean(worst) * 100:.1f}")
    per_class = next(line for line in table.splitlines() if line.startswith("| PGD-AT | ") and line.count("|") == 12)
    first = per_class.split("|")[2].strip()
    assert first.startswith(f"{statistics.mean(headline(r, 'best')['robust_acc_per_class'][0] for r in runs) * 100:.1f}")
    # from the runs' own split sizes and their profile's fixed test part (data.test_per_class = 20)
    assert "on a fixed class-balanced part of the test split (20 images a class, 200 in all" in table


def test_interval_is_students_t_half_width():
    mean, half = interval([0.30, 0.36, 0.33])
    assert mean == pytest.approx(0.33) and half == pytest.approx(4.302653 * 0.03 / 3 ** 0.5, rel=1e-6)
    assert interval([0.5])[0] == 0.5


def test_docs_blocks_are_what_the_generator_makes_of_the_committed_files():
    """Every generated block of docs/results.md equals the generator's output for its results folder:
    the table is never typed, and never left behind the committed runs."""
    docs = (ROOT / "docs" / "results.md").read_text()
    keys = re.findall(r"<!-- generated: ([\w.-]+) -->", docs)
    assert "cifar10-cpu" in keys
    for key in keys:
        block = docs.split(f"<!-- generated: {key} -->\n", 1)[1].split(f"\n<!-- end generated: {key} -->", 1)[0]
        folder = ROOT / "experiments" / "results" / key
        again = f"regenerate: python experiments/fairness_table.py experiments/results/{key} --write-docs docs/results.md"
        assert block == markdown(folder, compact=True), again
        # the full table beside the runs: per class, exploratory results, provenance
        assert (folder / "TABLE.md").read_text() == f"# {key}: the generated table\n\n{markdown(folder)}\n", again
        assert f"({'../experiments/results/' + key + '/TABLE.md'})" in block


def test_replace_block_keeps_the_rest_of_the_file():
    text = "a\n<!-- generated: k -->\nold\n<!-- end generated: k -->\nb\n"
    assert replace_block(text, "k", "new") == "a\n<!-- generated: k -->\nnew\n<!-- end generated: k -->\nb\n"


def test_a_run_trained_from_a_modified_tree_says_so():
    from fairtui.runs.provenance import commit_label

    assert commit_label({"git_commit": "7278ca51052759ad", "git_dirty": False}) == "7278ca5"
    assert commit_label({"git_commit": "7278ca51052759ad", "git_dirty": True}) == "7278ca5 with uncommitted changes"
    assert commit_label({}) == "?"


def test_compare_on_the_committed_cifar10_cpu_files_is_a_paired_t_test_of_their_worst_classes(tmp_path):
    """The issue's check: `fairtui compare --results experiments/results/cifar10-cpu --by profile --baseline
    cifar10-cpu-trades --checkpoint last --json` gives, for every group paired by seed, the n, mean, interval and p
    of scipy's paired t-test on the worst-class accuracies read straight from the committed events; adding the
    digits results pairs no digits group with the CIFAR-10 baseline."""
    from scipy import stats as scipy_stats

    from tests.conftest import fairtui_cmd

    results = ROOT / "experiments" / "results"
    out = fairtui_cmd("compare", "--results", str(results / "cifar10-cpu"), "--results", str(results / "digits"),
                      "--by", "profile", "--baseline", "cifar10-cpu-trades", "--checkpoint", "last", "--json",
                      home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert not any(e["group"].startswith("digits-") for e in doc["paired"])
    assert {e["group"] for e in doc["not_paired"]} >= {"digits-at", "digits-trades"}

    def worst_by_seed(profile):
        out = {}
        for run in (results / "cifar10-cpu" / profile).iterdir():
            seed = next(json.loads(line) for line in (run / "events.jsonl").open())["seed"]
            out[seed] = headline(run, "last")["worst_robust"]
        return out

    base = worst_by_seed("cifar10-cpu-trades")
    checked = 0
    for entry in doc["paired"]:
        if entry["metric"] != "worst_robust" or entry["pairing"] != "seed":
            continue
        mine = worst_by_seed(entry["group"])
        seeds = sorted(set(mine) & set(base))
        assert entry["n"] == len(seeds) and entry["seeds"] == seeds
        assert entry["mean"] == pytest.approx(statistics.mean(mine[s] - base[s] for s in seeds), abs=1e-12)
        if len(seeds) < 2:  # a row whose seeds are still training (DAFA's): no test, said as such
            assert entry["p"] is None and entry["ci95"] in (None, [None, None])
            continue
        test = scipy_stats.ttest_rel([mine[s] for s in seeds], [base[s] for s in seeds])
        assert entry["p"] == pytest.approx(test.pvalue, rel=1e-9)
        ci = test.confidence_interval(0.95)
        assert entry["ci95"] == pytest.approx([ci.low, ci.high], rel=1e-9)
        checked += 1
    assert checked >= 5


def test_an_empty_folder_is_refused_in_one_line(tmp_path):
    """#88 item 6: it exited 0 and printed nothing."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "fairness_table.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "no completed run in it" in out.stderr and not out.stdout
