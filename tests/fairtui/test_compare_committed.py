"""`compare RUN RUN --results DIR`: committed runs named as the home's are (#88 item 3)."""

from __future__ import annotations

import json

from tests.conftest import ROOT, fairtui_cmd

QUICK = ROOT / "experiments/results/cifar10-cpu-quick"


def test_compare_names_committed_runs_by_id_and_short_id_with_results(tmp_path):
    home = tmp_path / "home"
    alone = fairtui_cmd("compare", "4f4b3d", "1560b2", "--checkpoint", "last", home=home)
    assert alone.returncode == 2 and "no run '4f4b3d'" in alone.stderr  # not in the home, and nothing else named
    out = fairtui_cmd("compare", "4f4b3d", "20261202-042352-1560b2", "--results", str(QUICK), "--checkpoint", "last",
                      "--json", home=home)
    assert out.returncode == 0, out.stderr[-1500:]
    doc = json.loads(out.stdout)
    assert [r["run_id"] for r in doc["runs"]] == ["20261128-165837-4f4b3d", "20261202-042352-1560b2"], doc["runs"]
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())  # nothing copied into the home
    base = fairtui_cmd("compare", "1560b2", "--baseline", "4f4b3d", "9d4795", "--results", str(QUICK), "--checkpoint",
                       "last", "--json", home=home)
    assert base.returncode == 0, base.stderr[-1500:]
    assert json.loads(base.stdout)["runs"][0]["run_id"] == "20261128-165837-4f4b3d"
