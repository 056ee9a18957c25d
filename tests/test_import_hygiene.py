"""The import boundaries of DESIGN.md: engine without the app's packages, the CLI without torch."""

import json
import subprocess
import sys

from tests.conftest import ROOT


def loaded_modules(statement: str) -> set[str]:
    code = f"{statement}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return {m.split(".")[0] for m in json.loads(out.stdout.strip().splitlines()[-1])}


def test_engine_never_imports_the_app_packages():
    mods = loaded_modules("import engine, engine.run, engine.trainer, engine.methods, engine.final_eval")
    assert "torch" in mods  # the check below means something only if the engine really loaded
    assert not mods & {"fairtui", "textual", "tinydb"}


def test_cli_module_loads_no_torch_and_no_textual():
    mods = loaded_modules("import fairtui.cli")
    assert "typer" in mods
    assert "torch" not in mods
    assert "textual" not in mods


def test_cli_help_loads_no_torch():
    code = ("import sys\nfrom fairtui.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'CLEAN')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "CLEAN"
