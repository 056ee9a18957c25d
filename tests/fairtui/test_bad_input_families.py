"""Every bad input is refused with one line naming the file or option and the key, before anything
exists: the families of the hidden corpus (non-finite numbers, cross-field rules, the data root,
--gpus, unreadable profiles, size limits, option names)."""

import os

import pytest

from engine.contract.profile_io import load_profile
from engine.contract.profile_schema import ProfileError
from tests.conftest import TINY, fairtui_cmd

NON_FINITE = ["train.weight_decay", "train.momentum", "data.val_fraction", "train.lr", "attack.eps"]


@pytest.mark.parametrize("key", NON_FINITE)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused(tiny_profile, key, value):
    with pytest.raises(ProfileError, match="finite"):
        load_profile(tiny_profile(), [f"{key}={value}"])


@pytest.mark.parametrize("method, key", [("cfa", "lambda1"), ("frl", "margin_cap"), ("wat", "eta")])
def test_non_finite_method_keys_are_refused(tiny_profile, method, key):
    with pytest.raises(ProfileError, match=f"method.{key}: must be a finite number"):
        load_profile(tiny_profile(), [f'method.name="{method}"', f"method.{key}=nan"])


@pytest.mark.parametrize("overrides, key", [
    (["train.epochs=3", "train.milestones=[2, 1]"], "train.milestones"),
    (["train.milestones=[\"150%\"]"], "train.milestones"),
    (["eval.attacks=[]"], "eval.attacks"),
    (["eval.checkpoints=[]"], "eval.checkpoints"),
    (['method.name="trades"', "method.beta_per_class=[6.0, 6.0, 6.0]"], "method.beta_per_class"),
    (["seed=9223372036854775808"], "seed"),  # one past int64
    (["seed=-1"], "seed"),
    (['model.arch="wide_resnet"', "model.depth=30"], "model.depth"),
    (['description="' + "x" * 30_000 + '"'], "description"),
])
def test_cross_field_rules_and_limits(tiny_profile, overrides, key):
    with pytest.raises(ProfileError) as err:
        load_profile(tiny_profile(), overrides)
    assert err.value.key == key


def test_a_seed_at_the_top_of_int64_is_fine(tiny_profile):
    assert load_profile(tiny_profile(), ["seed=9223372036854775807"]).seed == 2**63 - 1
    from engine.data.augment import plan_epoch

    assert len(plan_epoch(5, 2, (1, 8, 8), "none", 2**63 - 1, 3).order) == 5


def untouched(home):
    return not home.exists() or not any(home.iterdir())


@pytest.mark.parametrize("make", ["binary", "utf16", "folder", "unreadable"])
def test_unreadable_profiles_get_one_line_and_exit_2(tmp_path, make):
    path = tmp_path / "p.toml"
    if make == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif make == "utf16":
        path.write_text(TINY, encoding="utf-16")
    elif make == "folder":
        path.mkdir()
    else:
        path.write_text(TINY)
        path.chmod(0)
        if os.access(path, os.R_OK):  # root reads anything: nothing to test here
            pytest.skip("running as root")
    home = tmp_path / "home"
    proc = fairtui_cmd("run", str(path), home=home)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert str(path) in proc.stderr
    assert untouched(home)


@pytest.mark.parametrize("root_kind", ["missing", "file", "empty"])
def test_a_bad_data_root_is_found_before_the_run_folder_exists(tmp_path, root_kind):
    """Missing, a file, or a folder without cifar-10-batches-py/: refused before any run folder exists, with the
    fix named (no failed run left in the history on every try)."""
    root = tmp_path / "cifar"
    if root_kind == "file":
        root.write_text("")
    elif root_kind == "empty":
        root.mkdir()
    path = tmp_path / "p.toml"
    path.write_text(TINY.replace('dataset = "digits"', f'dataset = "cifar10"\nroot = "{root}"'))
    home = tmp_path / "home"
    for args in (("run", str(path)), ("sweep", str(path), "--grid", "train.lr=0.1,0.2", "--gpus", "cpu")):
        proc = fairtui_cmd(*args, home=home)
        assert proc.returncode == 2 and "data.root" in proc.stderr, (args, proc.stderr)
        assert "--set data.root=DIR" in proc.stderr and "cifar-10-batches-py/" in proc.stderr
        assert untouched(home)


@pytest.mark.parametrize("gpus, words", [("99", "no GPU 99"), ("", "--gpus"), (" ", "--gpus"), ("zero", "--gpus"),
                                         ("0,0", "GPU 0 named more than once")])
def test_gpus_that_do_not_exist_are_refused_naming_what_does(tmp_path, tiny_profile, gpus, words):
    home = tmp_path / "home"
    proc = fairtui_cmd("run", str(tiny_profile()), f"--gpus={gpus}", home=home)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert untouched(home)


def test_gpu_choice_checks_the_inventory():
    from fairtui.launch.gpus import GpuInfo
    from fairtui.launch.launcher import GpuChoice

    two = [GpuInfo(0, "H100", 0, 80000, 0), GpuInfo(1, "H100", 0, 80000, 0)]
    assert GpuChoice.from_option("0,1", two).devices == (0, 1)
    with pytest.raises(ProfileError, match=r"no GPU 2 .*0 \(H100\), 1 \(H100\)"):
        GpuChoice.from_option("1,2", two)
    assert GpuChoice.from_option("cpu", []).cpu
    # Two processes on one GPU: NCCL's "Duplicate GPU detected" (the first H100 session) stops the ranks after
    # they started; the option is refused before anything is created instead.
    with pytest.raises(ProfileError, match=r"GPU 1 named more than once"):
        GpuChoice.from_option("0,1,1", two)


@pytest.mark.parametrize("args, option", [(("--eps", "abc"), "--eps"), (("--eps", "nan"), "--eps"),
                                          (("--checkpoint", "worst"), "--checkpoint"),
                                          (("--attack", "deepfool"), "--attack"), (("--split", "train"), "--split")])
def test_eval_option_messages_name_the_option(tmp_path, args, option):
    from fairtui.runs.synthetic import make_run

    make_run(tmp_path, "20260101-000000-aaaaaa", name="r")
    proc = fairtui_cmd("eval", "r", *args, home=tmp_path)
    assert proc.returncode == 2 and f"fairtui: {option}:" in proc.stderr, proc.stderr


def test_run_warns_of_a_milestone_that_will_not_fire_and_runs(tmp_path, tiny_profile):
    """`--set train.epochs=1` on a profile with later milestones: one warning line, and the run completes."""
    profile = tiny_profile("", base=TINY.replace("epochs = 2", "epochs = 2\nmilestones = [20]"))
    proc = fairtui_cmd("run", str(profile), "--set", "train.epochs=1", home=tmp_path / "home")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert lines == ["warning: train.milestones: milestone 20 is after the last epoch (1) and will not fire"]
    # the engine logs it too; `fairtui run` shows the engine's warnings, but not this one a second time
    assert proc.stderr.count("milestone 20 is after the last epoch (1)") == 1, proc.stderr


# -- one line, not a traceback (#55 item 12) ------------------------------------------------------------

def test_a_home_that_is_a_file_is_one_line(tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("mine\n")
    for args in (("ls",), ("show", "x"), ("tune", "show", "s")):
        proc = fairtui_cmd(*args, home=plain)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip().splitlines() == [f"fairtui: --home {plain}: not a folder (the home holds runs/, "
                                                    "studies/ and the index; give a folder, new or existing)"]
    assert plain.read_text() == "mine\n"


def test_a_deleted_working_directory_is_one_line_and_makes_no_run(tmp_path, tiny_profile):
    import subprocess
    import sys

    from tests.conftest import ROOT, engine_env

    gone, home = tmp_path / "gone", tmp_path / "home"
    gone.mkdir()
    env = {**engine_env(), "PYTHONPATH": str(ROOT)}
    code = (f"import os; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
            "from fairtui.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code, "run", str(tiny_profile()), "--home", str(home)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "the working directory no longer exists" in proc.stderr
    assert untouched(home)


def test_slurm_without_sbatch_or_srun_is_refused_before_anything_exists(tmp_path, tiny_profile):
    home = tmp_path / "home"
    bare = tmp_path / "bin"
    bare.mkdir()
    path = f"{bare}{os.pathsep}{os.path.dirname(os.path.realpath(__import__('sys').executable))}"
    for args in (("run", str(tiny_profile()), "--launcher", "slurm", "--partition", "gpu"),
                 ("sweep", str(tiny_profile()), "--launcher", "slurm", "--partition", "gpu", "--seeds", "2")):
        proc = fairtui_cmd(*args, home=home, env_extra={"PATH": path})
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "no sbatch and srun on PATH: this machine is not a Slurm login node" in proc.stderr
        assert untouched(home)


def test_a_late_end_record_cannot_undo_a_completed_run(tmp_path):
    """`stop --now` that raced with the last epoch: the engine completed, then an end was recorded beside the
    stream. The run reads completed."""
    from engine.contract.protocol import record_end
    from fairtui.runs.runfolder import RunView
    from fairtui.runs.synthetic import make_run

    run_dir = make_run(tmp_path, "r1", status="completed")
    record_end(run_dir, "stopped", "killed (SIGKILL) by fairtui stop --now", killed=True)
    assert RunView.load(run_dir).status() == "completed"
    stopped = make_run(tmp_path, "r2", status="stopped")  # a killed session of a run that had not completed
    record_end(stopped, "failed", "sbatch refused the job")
    assert RunView.load(stopped).status() == "failed"


def test_staging_folders_left_by_a_killed_run_are_removed_by_the_next_one(tmp_path, tiny_profile):
    import time

    home = tmp_path / "home"
    old, fresh = home / "runs" / ".new-20261127-010101-aaaaaa", home / "runs" / ".new-20261127-010102-bbbbbb"
    for folder in (old, fresh):
        folder.mkdir(parents=True)
        (folder / "profile.toml").write_text("")
    past = time.time() - 3600
    os.utime(old, (past, past))
    proc = fairtui_cmd("run", str(tiny_profile()), "--set", "train.epochs=1", "--detach", home=home)
    assert proc.returncode == 0, proc.stderr
    assert not old.exists() and fresh.exists()  # one still being made by a live process is left alone


def test_a_profile_named_without_its_folder_and_a_section_key_at_the_top_level_get_suggestions(tmp_path):
    """`fairtui run digits-at` and `--set epochs=3`, as a new user types them (#56 item 10)."""
    home = tmp_path / "home"
    proc = fairtui_cmd("run", "digits-at", home=home)
    assert proc.returncode == 2 and "did you mean profiles/digits-at.toml?" in proc.stderr, proc.stderr
    proc = fairtui_cmd("run", "profiles/digits-at.toml", "--set", "epochs=3", home=home)
    assert proc.returncode == 2 and "epochs: unknown key; did you mean train.epochs?" in proc.stderr, proc.stderr
    assert untouched(home)


def test_a_misspelt_profile_name_gets_the_closest_profile(tmp_path):
    """Found on the fresh-clone walk: profiles/cifar10-cpu-quick-pgd-at.toml (the method's name, where the file says
    at) got "no such profile file" and nothing more."""
    home = tmp_path / "home"
    for typed, meant in (("profiles/cifar10-cpu-quick-pgd-at.toml", "profiles/cifar10-cpu-quick-at.toml"),
                         ("profiles/digits-trade.toml", "profiles/digits-trades.toml")):
        proc = fairtui_cmd("run", typed, home=home)
        assert proc.returncode == 2 and f"did you mean {meant}?" in proc.stderr, proc.stderr
    proc = fairtui_cmd("run", "profiles/nothing-like-it.toml", home=home)
    assert proc.returncode == 2 and "did you mean" not in proc.stderr, proc.stderr
    assert untouched(home)


@pytest.mark.parametrize("name", ["ok\x1b]0;PWNED\x07", "evil\u202etxt.exe", "zero\u200bwidth", "bell\x07"])
def test_a_profile_name_is_checked_like_a_run_name(tmp_path, tiny_profile, name):
    """#71: `--set name=...` (or a profile's own name) with a control, bidirectional or zero-width character is
    refused like `--name`, with one line and exit 2, before anything exists."""
    home = tmp_path / "home"
    out = fairtui_cmd("run", str(tiny_profile()), "--set", f"name={name}", home=home)
    assert out.returncode == 2 and "name" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    refused = fairtui_cmd("run", str(tiny_profile()), "--name", name, home=home)
    assert refused.returncode == 2 and "control character" in refused.stderr


def test_text_from_a_home_or_a_journal_reaches_the_terminal_inert():
    """Whatever a home or a study's journal already holds (written before the checks, or by hand) is printed with
    its control, bidirectional and zero-width characters as visible escapes: `compare RUN RUN`'s table of the
    keys that differ and `tune show` as well as `ls`."""
    from rich.console import Console

    from fairtui.cli.tune import render
    from fairtui.judge.tables import comparison_tables
    from fairtui.runs.usertext import inert

    assert inert("evil\u202etxt.exe") == "evil\\u202etxt.exe" and inert("a\u200bb") == "a\\u200bb"
    doc = {"space": {}, "study": "s\x1b]0;PWNED\x07", "profile_path": "p\u202e.toml", "objective": "worst",
           "trials": [], "budget": 1, "pruner": "none"}
    text = render(doc)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\\x1b]0;PWNED\\x07" in text

    class Cmp:  # the parts of a comparison the tables read
        columns, baseline, checkpoint, mixed, settings, class_names = [], 0, "best", False, ["s"], []
        diff = {"name": ["ok\x1b]0;PWNED\x07", "fine"]}

    console = Console(record=True, width=200)
    for table in comparison_tables(Cmp()):
        console.print(table)
    shown = console.export_text()
    assert "\x1b]0" not in shown and "\\x1b]0;PWNED\\x07" in shown


def test_three_mistakes_a_new_user_made_get_their_fix(tmp_path, tiny_profile):
    """#73: a profile named with underscores, a misspelt section given with --set, and data.root set to the data
    set's own folder: each refused in one line that names the fix."""
    from tests.conftest import ROOT

    out = fairtui_cmd("run", "profiles/cifar10_cpu_trades.toml", home=tmp_path / "h")
    assert out.returncode == 2 and "did you mean profiles/cifar10-cpu-trades.toml?" in out.stderr
    out = fairtui_cmd("run", str(tiny_profile()), "--set", "trian.epochs=5", home=tmp_path / "h")
    assert out.returncode == 2 and "--set: trian: unknown key; did you mean 'train'?" in out.stderr
    own = tmp_path / "data" / "cifar-10-batches-py"
    own.mkdir(parents=True)
    (own / "test_batch").write_bytes(b"")
    out = fairtui_cmd("run", str(ROOT / "profiles" / "cifar10-cpu-quick-at.toml"), "--set", f"data.root={own}",
                      home=tmp_path / "h")
    assert out.returncode == 2 and f"give the folder that holds it: --set data.root={own.parent}" in out.stderr
    assert not (tmp_path / "h" / "runs").exists() or not any((tmp_path / "h" / "runs").iterdir())


def test_json_answers_every_path_with_exactly_one_document(tmp_path):
    """#71 item 9: with --json an error printed no document at all, and `resume --json` of a completed run exited 0
    with an empty stdout. Every path now answers with one document; an error's is {"error": LINE, "exit": CODE}."""
    import json

    from fairtui.runs.synthetic import make_run

    home = tmp_path / "home"
    make_run(home, "20260101-000000-done01", name="done")
    cases = [(["show", "nosuch"], 2, "no run 'nosuch'"), (["ls", "--limit", "-1"], 2, "'--limit'"),
             (["resume", "done"], 0, "has completed; nothing to resume"),
             (["compare", "done"], 2, "compare takes 2 to 20 runs")]
    for args, code, said in cases:
        out = fairtui_cmd(*args, "--json", home=home)
        assert out.returncode == code, (args, out.stderr)
        (doc,) = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        assert doc["exit"] == code and said in (doc["error"] if code else doc["message"]), (args, doc)
    ok = json.loads(fairtui_cmd("show", "done", "--json", home=home).stdout)  # a document of its own: nothing added
    assert ok["name"] == "done" and "exit" not in ok
