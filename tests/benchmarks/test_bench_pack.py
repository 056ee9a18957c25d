"""benchmarks/bench_pack.py: its CPU smoke mode sums the runs' timed images over their common window, and a
count that would pass the deadline is skipped and said so, not started."""

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, engine_env


def _bench():
    spec = importlib.util.spec_from_file_location("bench_pack", ROOT / "benchmarks" / "bench_pack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(600)
def test_two_runs_at_once_sum_their_images_over_the_common_window(tmp_path):
    out = tmp_path / "pack.json"
    proc = subprocess.run([sys.executable, "benchmarks/bench_pack.py", "--device", "cpu", "--tiny", "--runs", "2",
                           "--epochs", "1", "--threads", "1", "--json", str(out)],
                          cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["runs"] == 2 and not row["mps"] and "error" not in row
    runs = row["per_run"]
    assert [r["seed"] for r in runs] == [0, 1]
    assert row["images"] == sum(r["train_images"] * len(r["epoch_s"]) for r in runs) == 2 * runs[0]["train_images"]
    # the window runs from the first release at the barrier to the last run's end: it holds every timed epoch
    assert row["window_s"] == pytest.approx(max(r["t1"] for r in runs) - min(r["t0"] for r in runs))
    assert all(row["window_s"] >= sum(r["epoch_s"]) for r in runs)
    assert row["images_per_s"] == pytest.approx(row["images"] / row["window_s"])
    assert "| 2 | no |" in proc.stdout


def test_a_count_past_the_deadline_is_estimated_from_the_measured_rate():
    bench = _bench()
    measured = [{"runs": 1, "mps": False, "images": 1000, "images_per_s": 100.0, "warm_s_max": 10.0,
                 "epoch_s_mean": 10.0, "cpu_per_wall": 0.5}]
    # warm-up 10 s x 1.5 (more runs than measured) + 4 runs x 1000 images at the best 100 images/s
    assert bench.estimate_s(4, measured) == pytest.approx(15 + 40)
    assert bench.estimate_s(1, measured) == pytest.approx(10 + 10)
    assert bench.estimate_s(2, []) == 0.0  # nothing measured yet: the first count always runs
    table = bench.table([*measured, {"runs": 6, "mps": True, "skipped": "skipped: about 80 s needed, 5 left"}])
    assert "| 1 | no | 100 | 1.00x |" in table and "| 6 | yes | skipped: about 80 s needed, 5 left |" in table
