"""The entry point's exit status after a handled Ctrl-C: 130, whatever the interrupt passed through on its way."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, engine_env

PROBE = '''
import fairtui.cli

def app():  # a Ctrl-C that lands inside a string eval, as in collections.namedtuple while torch imports
    eval("(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))()")

fairtui.cli.app = app
from fairtui.console import main
main()
'''


def test_a_ctrl_c_that_passed_through_a_string_eval_still_exits_130(tmp_path):
    """Found by the CI run of the ten-Ctrl-C judge test: the judgement printed its "stopped" line and the process
    died by SIGINT (-2), because CPython 3.11 remembers an interrupt that left an eval() as unhandled and kills
    `python -m` with SIGINT at exit. The entry point clears that mark: exit 130, no traceback."""
    (tmp_path / "probe_ctrl_c.py").write_text(PROBE)
    env = {**engine_env(), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    out = subprocess.run([sys.executable, "-m", "probe_ctrl_c"], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 130, (out.returncode, out.stderr[-1500:])
    assert "Traceback" not in out.stderr, out.stderr[-1500:]
