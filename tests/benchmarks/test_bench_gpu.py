"""benchmarks/bench_gpu.py keeps working: its CPU smoke mode times all four loops and writes its table."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, engine_env


@pytest.mark.timeout(600)
def test_bench_gpu_tiny_cpu_mode(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--device", "cpu", "--tiny", "--profiles",
                           "cfa-at", "--precisions", "fp32", "--epochs", "2", "--json", str(out)],
                          cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| cfa-at | fp32 |" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1
    for key in ("bare_eager", "bare_compiled", "engine_eager", "engine_compiled"):
        assert len(rows[0][key]) == 2 and all(t > 0 for t in rows[0][key])
    assert rows[0]["ratio_compiled"] == pytest.approx(rows[0]["engine_compiled_s"] / rows[0]["bare_compiled_s"])
