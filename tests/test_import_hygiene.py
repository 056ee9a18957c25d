"""The import boundaries: the layering contracts of pyproject.toml ([tool.importlinter]: the
engine never imports the app, engine.contract never imports torch nor the rest of the engine, the app imports
the engine through engine.contract alone, no import circles in any package),
checked by import-linter; and, at run
time, what import-linter cannot see (it counts an import inside a function like one at the top): the
CLI and the app load without torch."""

import json
import subprocess
import sys

from tests.conftest import ROOT


def loaded_modules(statement: str) -> set[str]:
    code = f"{statement}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return {m.split(".")[0] for m in json.loads(out.stdout.strip().splitlines()[-1])}


def test_the_layering_contracts_hold():
    out = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                          "lint_imports_command()"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "10 kept, 0 broken" in out.stdout


def test_fairtui_shows_its_plan_packages_with_a_purpose_and_few_top_level_modules():
    """The tree is the architecture: fairtui's code lives in packages named for what they serve, each saying in its
    docstring what it is for and what it may import; at its top, little beside __init__ and __main__."""
    import ast

    top = ROOT / "fairtui"
    modules = sorted(p.name for p in top.glob("*.py"))
    assert len(modules) <= 5, modules
    packages = sorted(p.name for p in top.iterdir() if (p / "__init__.py").is_file())
    assert {"runs", "launch", "judge", "tune", "cli", "app", "figures"} <= set(packages), packages
    for name in ("runs", "launch", "judge", "tune"):
        doc = ast.get_docstring(ast.parse((top / name / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), name  # what it is for, and what it may import


def test_the_engine_shows_its_plan_packages_with_a_purpose_and_at_most_six_top_level_modules():
    """#85: engine/ reads from its tree: the process entry points, training, evaluation, methods, attacks, data,
    models, the runtime and the contract, each package saying what it is for and what it may import; at its top only
    __init__ and __main__; and the layers between them are import-linter's (test_the_layering_contracts_hold)."""
    import ast
    import tomllib

    top = ROOT / "engine"
    modules = sorted(p.name for p in top.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py"] and len(modules) <= 6, modules
    packages = sorted(p.name for p in top.iterdir() if (p / "__init__.py").is_file())
    assert packages == ["attacks", "contract", "data", "entry", "evaluation", "methods", "models", "runtime",
                        "training"], packages
    for name in ("entry", "training", "evaluation", "runtime", "attacks"):
        doc = ast.get_docstring(ast.parse((top / name / "__init__.py").read_text()))
        assert doc and "may import" in doc.lower(), name
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and c["layers"][0] == "engine.entry"]
    assert layers["layers"][-1] == "engine.contract" and "engine.runtime" in layers["layers"]


def test_no_python_file_of_engine_fairtui_or_experiments_is_over_400_lines():
    """The house's limit (STYLE.md): a module that grows past it is split by what it does."""
    long = {str(p.relative_to(ROOT)): n for folder in ("engine", "fairtui", "experiments")
            for p in (ROOT / folder).rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_no_import_circle_at_import_time_in_engine_fairtui_or_experiments():
    """Every module imports first of its own packages (a circle at import time fails whichever module of it is
    imported first): each one in turn with engine, fairtui and experiments dropped from sys.modules before it
    (torch and the rest stay loaded, so the walk takes seconds), engine.__main__ aside (it runs the command line)."""
    names = []
    for folder in ("engine", "fairtui", "experiments"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT).with_suffix("")
            if rel.name == "__main__" or "results" in rel.parts:
                continue
            names.append(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
    code = ("import importlib, json, sys\n"
            "bad = {}\n"
            "for name in json.loads(sys.argv[1]):\n"
            "    for mod in [m for m in sys.modules if m.split('.')[0] in ('engine', 'fairtui', 'experiments')]:\n"
            "        del sys.modules[mod]\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ImportError as err:\n"
            "        bad[name] = f'{type(err).__name__}: {err}'\n"
            "print(json.dumps(bad))\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(names)], capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


def test_the_apps_door_contract_names_every_engine_module_outside_the_contract():
    """The app may import engine.contract alone: pyproject's forbidden list must name every other module of
    the engine, so that a module added to the engine is forbidden to the app until it joins the contract."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    door = next(c for c in contracts if c["source_modules"] == ["fairtui"] and "torch" in c["forbidden_modules"])
    named = {m.removesuffix(".*") for m in door["forbidden_modules"] if m.startswith("engine.")}
    children = {f"engine.{p.stem}" for p in (ROOT / "engine").iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and p.name != "__pycache__")}
    assert named == children - {"engine.contract"}, children - {"engine.contract"} ^ named


def test_cli_module_loads_no_torch_and_no_textual():
    mods = loaded_modules("import fairtui.cli")
    assert "typer" in mods
    assert "torch" not in mods
    assert "textual" not in mods
    assert "optuna" not in mods  # an extra: `fairtui tune` imports it when a study runs


def test_cli_help_loads_no_torch():
    code = ("import sys\nfrom fairtui.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'CLEAN')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "CLEAN"


def test_ctrl_c_while_the_command_line_loads_ends_quietly_with_exit_130():
    """SIGINT delivered while typer is being imported (the first thing the command line loads): exit 130 and no
    KeyboardInterrupt traceback, as after start-up. The signal is sent from inside the import, so the test does not
    depend on timing."""
    code = ("import builtins, os, signal, sys\n"
            "real = builtins.__import__\n"
            "def hooked(name, *args, **kw):\n"
            "    if name == 'typer' and 'typer' not in sys.modules:\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "    return real(name, *args, **kw)\n"
            "builtins.__import__ = hooked\n"
            "sys.argv = ['fairtui', 'ls']\n"
            "from fairtui.console import main\n"
            "main()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 130, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "KeyboardInterrupt" not in out.stderr, out.stderr[-2000:]
