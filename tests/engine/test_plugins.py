"""Methods from outside the repository (engine.contract.plugins): an installed package's method trains, resumes
and shows in compare; a broken or clashing plugin is reported in one line and the built-ins keep working."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S, ROOT, events_of, make_run_dir
from tests.engine.test_training import epoch_ends, wait_for

EXAMPLE = ROOT / "examples" / "fairtui-irw"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example package installed by pip (wheel built from its pyproject, entry point registered)."""
    target = tmp_path_factory.mktemp("site")
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(target), str(EXAMPLE)], capture_output=True, text=True,
                         timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert list(target.glob("fairtui_irw-*.dist-info/entry_points.txt"))
    return target


def env_with(site: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), env.get("PYTHONPATH", "")])
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


@pytest.fixture
def plugin_path(site, monkeypatch):
    from engine.contract import plugins

    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins, "_loaded", None)
    return site


def engine(run_dir: Path, site: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "train", str(run_dir)], env=env_with(site),
                          capture_output=True, text=True, timeout=HANG_S, cwd=ROOT, **kw)


def test_an_installed_method_trains_resumes_and_shows_in_compare(tmp_path, tiny_profile, plugin_path):
    from engine.contract.profile_io import load_profile
    from engine.contract.profile_schema import ProfileError

    profile = tiny_profile()
    overrides = ('method.name="irw_at"', "method.momentum=0.25", "train.epochs=3")
    assert load_profile(profile, list(overrides)).method.momentum == 0.25
    with pytest.raises(ProfileError, match="method.momentum"):  # its keys are checked like ours
        load_profile(profile, ['method.name="irw_at"', "method.momentum=2"])
    with pytest.raises(ProfileError, match="method.mommentum"):
        load_profile(profile, ['method.name="irw_at"', "method.mommentum=0.5"])

    straight = make_run_dir(tmp_path, profile, "straight", overrides)
    res = engine(straight, plugin_path)
    assert res.returncode == 0, res.stderr
    killed = make_run_dir(tmp_path, profile, "killed", overrides)
    proc = subprocess.Popen([sys.executable, "-m", "engine", "train", str(killed)], env=env_with(plugin_path),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: 1 in epoch_ends(killed))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    res = engine(killed, plugin_path)
    assert res.returncode == 0, res.stderr
    states = lambda run: [e["method_state"] for e in events_of(run) if e["type"] == "epoch_end"]  # noqa: E731
    assert states(straight) == states(killed)
    weights = [s["class_weight"] for s in states(straight)]
    assert weights[0] == [1.0] * 10 and weights[1] != weights[0]  # epoch 2 trains with the re-weighting
    finals = lambda run: [e["robust_acc_per_class"] for e in events_of(run) if e["type"] == "eval_result"]  # noqa
    assert finals(straight) == finals(killed)

    out = subprocess.run([sys.executable, "-c", "from fairtui.cli import main; main()", "compare", "straight",
                          "killed", "--home", str(tmp_path), "--json"], env=env_with(plugin_path), cwd=ROOT,
                         capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["run_id"] for r in doc["runs"]] == ["straight", "killed"]
    assert doc["runs"][0]["robust_acc_per_class"] == doc["runs"][1]["robust_acc_per_class"] == finals(straight)[0]
    shown = subprocess.run([sys.executable, "-c", "from fairtui.cli import main; main()", "show", "killed", "--home",
                            str(tmp_path), "--json"], env=env_with(plugin_path), cwd=ROOT, capture_output=True,
                           text=True, timeout=HANG_S)
    doc = json.loads(shown.stdout)
    assert doc["method"] == "irw_at" and doc["method_state"]["class_weight"] == weights[-1]


def test_a_broken_or_clashing_plugin_is_reported_in_one_line_and_builtins_work(tmp_path, tiny_profile):
    site = tmp_path / "site"
    for dist, version, entries in (("broken_pkg", "0.1", "broken = broken_mod:Method\n"),
                                   ("clash_pkg", "2.0", "pgd_at = json:dumps\n"),
                                   ("wrong_pkg", "1.0", "wrong = json:dumps\n")):
        info = site / f"{dist}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text("[fairtui.methods]\n" + entries)
    script = ("import sys\nfrom engine.contract.profile_io import load_profile\nfrom engine.contract.profile_schema import ProfileError\n"
              f"p = load_profile({str(tiny_profile())!r})\nprint('builtin', p.method.name)\n"
              "try:\n"
              f"    load_profile({str(tiny_profile())!r}, ['method.name=\"broken\"'])\n"
              "except ProfileError as err:\n    print('error', err)\n")
    out = subprocess.run([sys.executable, "-c", script], env=env_with(site), cwd=ROOT, capture_output=True,
                         text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert "builtin pgd_at" in out.stdout  # a built-in method never loads the plugins
    assert "unknown method 'broken'" in out.stdout and "pgd_at" in out.stdout.split("error", 1)[1]
    lines = [line for line in out.stderr.splitlines() if line.startswith("fairtui: method plugin")]
    assert len(lines) == 2, out.stderr  # the named plugin alone is loaded: 'wrong' is never imported
    assert any("'broken' (broken-pkg 0.1) failed to load: ModuleNotFoundError" in line for line in lines)
    assert any("'pgd_at' (clash-pkg 2.0) ignored: names the method 'pgd_at', which is already taken" in line
               for line in lines)
    wrong = subprocess.run([sys.executable, "-c", script.replace('method.name="broken"', 'method.name="wrong"')],
                           env=env_with(site), cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert any("'wrong' (wrong-pkg 1.0) ignored" in line and "Method" in line for line in wrong.stderr.splitlines())


def test_a_profile_naming_a_plugin_is_checked_without_its_method_or_torch(tiny_profile, site):
    """The example declares its params in a torch-free module (entry point group fairtui.method_params): a
    profile check (`fairtui run`, `sweep`, the launch dialog) imports neither the method nor torch."""
    script = ("import sys\nfrom engine.contract.profile_io import load_profile\n"
              f"p = load_profile({str(tiny_profile())!r}, ['method.name=\"irw_at\"', 'method.momentum=0.25'])\n"
              "print(p.method.name, p.method.momentum, 'torch' in sys.modules, 'fairtui_irw.method' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], env=env_with(site), cwd=ROOT, capture_output=True,
                         text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["irw_at", "0.25", "False", "False"], out.stdout + out.stderr
    # a plugin that declares no params entry point still works, its method imported to read them, and says so
    legacy = site.parent / "legacy-site"
    info = legacy / "legacy_irw-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: legacy-irw\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[fairtui.methods]\nirw_old = legacy_irw:Method\n")
    (legacy / "legacy_irw.py").write_text("from fairtui_irw.method import InverseRobustnessReweighting as M\n"
                                          "from fairtui_irw.params import IRWParams\n"
                                          "class P(IRWParams):\n    name = 'irw_old'\n"
                                          "class Method(M):\n    name = 'irw_old'\n    params = P\n")
    env = env_with(site)
    env["PYTHONPATH"] = os.pathsep.join([str(legacy), env["PYTHONPATH"]])
    old = subprocess.run([sys.executable, "-c", script.replace("irw_at", "irw_old")], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=HANG_S)
    assert old.returncode == 0, old.stderr
    assert old.stdout.split()[:2] == ["irw_old", "0.25"]
    assert "declares no fairtui.method_params entry point" in old.stderr


def test_a_misspelt_name_imports_no_plugin_and_a_plugin_can_neither_hang_nor_end_the_process(tmp_path,
                                                                                             monkeypatch):
    """A plugin that hangs or calls sys.exit at import: a typo in method.name lists the names without
    importing any plugin; naming the bad plugin reports it in one line, within LOAD_TIMEOUT_S."""
    import time

    from engine.contract import plugins
    from engine.contract.config import profile_from_table
    from engine.contract.profile_schema import ProfileError

    site = tmp_path / "site"
    for dist, entry, body in (("hang_pkg", "hangs = hang_mod:Method", "import time\ntime.sleep(3600)\n"),
                              ("exit_pkg", "exits = exit_mod:Method", "import sys\nsys.exit(3)\n")):
        info = site / f"{dist}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[fairtui.methods]\n{entry}\n")
        (site / f"{entry.split('= ')[1].split(':')[0]}.py").write_text(body)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins, "_loaded", None)
    monkeypatch.setattr(plugins, "LOAD_TIMEOUT_S", 2.0)
    with pytest.raises(ProfileError, match="unknown method 'hangz'.*exits.*hangs") as err:
        profile_from_table({"method": {"name": "hangz"}}, "p.toml")
    assert "hang_mod" not in sys.modules and "exit_mod" not in sys.modules  # nothing imported for a typo
    started = time.time()
    for name, why in (("exits", "it called sys.exit(3) while importing"),
                      ("hangs", "its import did not finish within 2 s")):
        with pytest.raises(ProfileError, match=f"unknown method {name!r}"):
            profile_from_table({"method": {"name": name}}, "p.toml")
        assert any(why in line for line in plugins.problems()), plugins.problems()
    assert time.time() - started < 30 and str(err.value).count("\n") == 0
