"""The experiment scripts refuse bad counts and folders in one line, exit 2, before anything trains or is made."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, engine_env


@pytest.mark.parametrize("script, args, says", [
    ("tune_all.py", ["--trials", "0"], "--trials: 0 is below 1"),
    ("tune_all.py", ["--trials", "-3"], "--trials: -3 is below 1"),
    ("tune_all.py", ["--parallel", "0"], "--parallel: 0 is below 1"),
    ("tune_all.py", ["--defaults-from", "{tmp}/nowhere"], "not a fairtui home"),
    ("cifar10_fairness.py", ["--workers", "0", "--data-root", "{tmp}"], "--workers: 0 is below 1"),
    ("cifar10_fairness.py", ["--threads", "-1", "--data-root", "{tmp}"], "--threads: -1 is below 0"),
    ("fairness_table.py", ["{tmp}/missing"], "no such folder"),
])
def test_bad_arguments_are_one_line_and_nothing_starts(tmp_path, script, args, says):
    home = tmp_path / "home"
    cmd = [sys.executable, str(ROOT / "experiments" / script), *(a.format(tmp=tmp_path) for a in args)]
    if script != "fairness_table.py":
        cmd += ["--home", str(home)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=engine_env(), timeout=120)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
    assert not home.exists()
