"""`fairtui ls` keeps its most important columns whole at any width; the short id it shows is a RUN."""

import json
import re

import pytest

from fairtui.runs.synthetic import make_run
from tests.conftest import fairtui_cmd

NAMES = ["cfa-trades-wrn34-10-lambda1-sweep-long-name-0", "wat"]


@pytest.fixture
def home(tmp_path):
    for i, name in enumerate(NAMES):
        make_run(tmp_path, f"20261122-10000{i}-ab{i}d9e", name=name, method="cfa", seed=i)
    return tmp_path


def header(out: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.strip().startswith(("id", "name")))
    return line.split()


@pytest.mark.parametrize("width, must, dropped", [
    (60, ["name", "status", "epoch", "robust", "worst"], ["method", "started"]),
    (80, ["id", "name", "status", "epoch", "clean", "robust", "worst"], ["run"]),
    (140, ["id", "name", "method", "data", "status", "epoch", "clean", "robust", "worst", "started"], ["run"]),
])
def test_columns_by_priority_and_never_cut_to_one_character(home, width, must, dropped):
    proc = fairtui_cmd("ls", home=home, env_extra={"COLUMNS": str(width)})
    assert proc.returncode == 0, proc.stderr
    cols = header(proc.stdout)
    assert all(c in cols for c in must) and not any(c in cols for c in dropped), cols
    assert max(len(line) for line in proc.stdout.splitlines()) <= width
    assert "completed" in proc.stdout
    cut = re.findall(r"(\S+)…(\S+)", proc.stdout)  # only the long name shrinks, in its middle: its head and its end
    assert all(NAMES[0].startswith(a) and NAMES[0].endswith(b) and len(a) + len(b) >= 11 for a, b in cut), cut


def test_wide_shows_everything_and_the_short_id_is_a_run_reference(home):
    proc = fairtui_cmd("ls", "--wide", home=home, env_extra={"COLUMNS": "80"})
    assert "20261122-100000-ab0d9e" in proc.stdout and NAMES[0] in proc.stdout
    shown = fairtui_cmd("show", "ab0d9e", "--json", home=home)  # the id form ls, compare and the app show
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["name"] == NAMES[0]
    assert fairtui_cmd("show", "ab1d", "--json", home=home).returncode == 0  # a unique prefix of it


def test_a_count_agrees_with_its_number():
    """"1 runs" in the runs screen's status line and a one-seed sweep's first line (#56 item 10)."""
    from fairtui.app.screens.runs_table import counts_line
    from fairtui.runs.usertext import count

    assert [count(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert count(1, "class", "classes") == "1 class" and count(3, "class", "classes") == "3 classes"
    assert counts_line([{"status": "completed"}], 1, 0, "started", True, 200).startswith("1 of 1 run, ")


def test_the_runs_status_line_keeps_the_sweeps_before_the_sort_at_80_columns():
    """#56 item 8: at 80 columns the sweep's progress is what stays; the sort follows where it fits."""
    from fairtui.app.screens.runs_table import counts_line

    docs = [{"status": "completed", "sweep": "a1b2c3d4"}, {"status": "running", "sweep": "a1b2c3d4"},
            {"status": "queued", "sweep": "a1b2c3d4"}, {"status": "completed"}]
    line = counts_line(docs, 4, 0, "started", True, 80)
    assert line.startswith("4 of 4 runs, 1 running, 1 queued | sweep a1b2c3d4 1/3 done, 1 running") and len(line) <= 80
    wide = counts_line(docs, 4, 2, "started", True, 200)
    assert wide.endswith("2 marked | sweep a1b2c3d4 1/3 done, 1 running; sorted by started (desc)")
    assert counts_line(docs, 4, 0, "name", False, 40) == "4 of 4 runs, 1 running, 1 queued"


def test_ls_marks_numbers_that_are_not_the_best_checkpoints_test_result(tmp_path):
    """#73 item 8: `ls` showed "-" for a running run's robust accuracy (the app shows its validation numbers, marked
    v), and during the test evaluation the last checkpoint's number under the best checkpoint's header."""
    from fairtui.cli.ls import cells

    doc = {"run_id": "20260101-000000-aaaaaa", "status": "running", "epoch": 3, "epochs": 10,
           "val": {"avg_robust": 0.41, "worst_robust": 0.12}}
    assert (cells(doc)["robust"], cells(doc)["worst"]) == ("0.410v", "0.120v")
    last_only = {**doc, "summary": {"last/pgd20": {"avg_robust": 0.5, "worst_robust": 0.2, "avg_clean": 0.8}}}
    assert cells(last_only)["robust"] == "0.500l" and cells(last_only)["clean"] == "0.800l"
    best = {**doc, "summary": {"best/pgd20": {"avg_robust": 0.52, "worst_robust": 0.21, "avg_clean": 0.81},
                               **last_only["summary"]}}
    assert cells(best)["robust"] == "0.520"
