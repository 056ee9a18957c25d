"""ls, show, compare, tag, note, rm, stop on synthetic and real run folders (export: test_cli_export.py)."""

import json
import os
import statistics

import pytest

from engine.contract.config import Profile
from fairtui.runs.synthetic import make_run
from tests.conftest import HANG_S, ROOT, fairtui_cmd


@pytest.fixture
def home(tmp_path):
    make_run(tmp_path, "20260101-000000-aaaaaa", name="base", method="pgd_at", robust_centre=0.4, tags=("t1",))
    make_run(tmp_path, "20260101-000001-bbbbbb", name="fair", method="cfa", robust_centre=0.5)
    make_run(tmp_path, "20260101-000002-cccccc", name="broken", status="failed")
    return tmp_path


def cli(*args, home):
    return fairtui_cmd(*args, home=home, env_extra={"COLUMNS": "200"})


def test_ls_json_filters_and_newest_first(home):
    out = cli("ls", "--json", home=home)
    assert out.returncode == 0, out.stderr
    docs = json.loads(out.stdout)
    assert [d["name"] for d in docs] == ["broken", "fair", "base"]
    assert [d["name"] for d in json.loads(cli("ls", "--json", "--status", "failed", home=home).stdout)] == ["broken"]
    assert [d["name"] for d in json.loads(cli("ls", "--json", "--tag", "t1", home=home).stdout)] == ["base"]
    assert [d["name"] for d in json.loads(cli("ls", "--json", "--name", "f*", home=home).stdout)] == ["fair"]
    assert "base" in cli("ls", home=home).stdout


def test_run_references_unknown_and_ambiguous(home):
    assert json.loads(cli("show", "fair", "--json", home=home).stdout)["run_id"] == "20260101-000001-bbbbbb"
    assert json.loads(cli("show", "20260101-000000", "--json", home=home).stdout)["name"] == "base"
    unknown = cli("show", "fiar", home=home)
    assert unknown.returncode == 2 and "did you mean fair" in unknown.stderr
    ambiguous = cli("show", "20260101", home=home)
    assert ambiguous.returncode == 2 and "ambiguous" in ambiguous.stderr and "aaaaaa" in ambiguous.stderr


def test_compare_deltas_and_rho_by_hand(home):
    out = cli("compare", "base", "fair", "--json", home=home)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    runs = {r["name"]: r for r in doc["runs"]}
    b, f = runs["base"], runs["fair"]
    avg_b, avg_f = statistics.mean(b["robust_acc_per_class"]), statistics.mean(f["robust_acc_per_class"])
    worst_b, worst_f = min(b["robust_acc_per_class"]), min(f["robust_acc_per_class"])
    assert f["delta_vs_baseline"]["avg_robust"] == pytest.approx(avg_f - avg_b)
    assert f["delta_vs_baseline"]["worst_robust"] == pytest.approx(worst_f - worst_b)
    assert f["rho"] == pytest.approx((worst_f - worst_b) / worst_b - (avg_b - avg_f) / avg_b)
    assert f["worst_class"] == f["robust_acc_per_class"].index(worst_f)
    assert doc["config_diff"]["method.name"] == ["pgd_at", "cfa"]
    assert "name" in doc["config_diff"] and "train.epochs" not in doc["config_diff"]
    human = cli("compare", "base", "fair", home=home)
    assert "rho" in human.stdout and "(base)" in human.stdout


def test_compare_of_runs_shows_the_runtime_they_trained_with_when_it_differs(home):
    """Two runs that asked for the same runtime ("auto") may have trained in fp32 on one CPU and in bf16 on
    another: `compare RUN RUN` lists what ran among the keys that differ, and says nothing where it agrees."""
    assert "runtime" not in json.loads(cli("compare", "base", "fair", "--json", home=home).stdout)["config_diff"]
    events = home / "runs" / "20260101-000001-bbbbbb" / "events.jsonl"
    lines = events.read_text().splitlines()
    started = json.loads(lines[0])
    started["runtime"] = "autocast bfloat16, channels-last"
    events.write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")
    doc = json.loads(cli("compare", "base", "fair", "--json", home=home).stdout)
    assert doc["config_diff"]["runtime"] == ["fp32", "autocast bfloat16, channels-last"]
    assert "autocast bfloat16, channels-last" in cli("compare", "base", "fair", home=home).stdout


def test_compare_errors_say_what_exists(home):
    missing = cli("compare", "base", "fair", "--attack", "aa", home=home)
    assert missing.returncode == 2 and "has no aa result" in missing.stderr and "best/pgd20" in missing.stderr
    assert cli("compare", "base", home=home).returncode == 2
    failed = cli("compare", "base", "broken", home=home)
    assert failed.returncode == 2 and "has no robust result on test" in failed.stderr


def subset_result(run_dir, attack: str, n: int, robust: float) -> None:
    """Append what `fairtui eval RUN --attack ATTACK --n-per-class N` writes (a subset result)."""
    from engine.contract.profile_io import load_profile
    from engine.contract.results import requested_setting

    config = load_profile(run_dir / "profile.toml").to_table()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    k = 10
    event = {"v": 1, "seq": len(events), "t": 0.0, "run_id": run_dir.name, "type": "eval_result", "split": "test",
             "checkpoint": "best", "epoch": 5, "attack": attack, "eps": config["eval"]["eps"], "n_per_class": n,
             "setting": requested_setting(config, attack, n_per_class=n), "clean_acc_per_class": [0.9] * k,
             "robust_acc_per_class": [robust] * (k - 1) + [robust / 2], "avg_clean": 0.9,
             "avg_robust": robust * (k - 0.5) / k, "worst_robust": robust / 2, "cv": 0.0, "mcd": robust / 2}
    with open(run_dir / "events.jsonl", "a") as fh:
        fh.write(json.dumps(event) + "\n")


def test_subset_results_compare_and_export_by_their_setting(tmp_path):
    """After `eval --attack aa --n-per-class 10`, `compare --attack aa --n-per-class 10` compares those results,
    labelled as such; without the option the refusal lists what exists, with its settings."""
    a = make_run(tmp_path, "20260101-000000-aaaaaa", name="a")
    b = make_run(tmp_path, "20260101-000001-bbbbbb", name="b")
    subset_result(a, "aa", 10, 0.4)
    subset_result(b, "aa", 10, 0.6)
    refused = cli("compare", "a", "b", "--attack", "aa", home=tmp_path)
    assert refused.returncode == 2
    assert "test best/aa (eps 8/255, 10 per class)" in refused.stderr
    assert "test best/pgd20 (eps 8/255, whole split)" in refused.stderr
    out = cli("compare", "a", "b", "--attack", "aa", "--n-per-class", "10", "--json", home=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["n_per_class"] for r in doc["runs"]] == [10, 10] and not doc["settings_differ"]
    assert doc["runs"][1]["summary"]["worst_robust"] == pytest.approx(0.3)
    text = cli("compare", "a", "b", "--attack", "aa", "--n-per-class", "10", home=tmp_path).stdout
    assert "aa, eps 8/255, 10 per class @ best" in text
    md = cli("export", "a", "b", "--attack", "aa", "--n-per-class", "10", "--format", "md", home=tmp_path).stdout
    assert md.startswith("aa, eps 8/255, 10 per class @ best")
    missing = cli("export", "a", "b", "--attack", "aa", "--n-per-class", "5", home=tmp_path)
    assert missing.returncode == 2 and "has no aa result on test at 'best' on 5 per class" in missing.stderr


def test_a_comparison_of_different_settings_says_so(tmp_path):
    """Two runs trained (and evaluated) at different eps: the table names each run's setting and says they
    differ; rho against a baseline whose worst class is 0 says why it is undefined."""
    from engine.contract.config import AttackConfig

    make_run(tmp_path, "20260101-000000-aaaaaa", name="a", profile=Profile(name="a", attack=AttackConfig(eps=0.2)))
    make_run(tmp_path, "20260101-000001-bbbbbb", name="b", profile=Profile(name="b", attack=AttackConfig(eps=0.1)),
             robust_centre=0.0)
    text = cli("compare", "b", "a", home=tmp_path).stdout
    assert "SETTINGS DIFFER" in text and "pgd20, eps 0.1, whole split" in text and "pgd20, eps 0.2, whole" in text
    assert "undefined: the baseline's worst class is 0" in text


def test_tag_note_and_rm(home):
    tagged = cli("tag", "fair", "paper", "cifar", home=home)
    assert tagged.returncode == 0 and tagged.stderr == "run fair [20260101-000001-bbbbbb]: tags paper, cifar\n"
    noted = cli("note", "fair", "the good one", home=home)
    assert noted.returncode == 0 and noted.stderr == "run fair [20260101-000001-bbbbbb]: note saved (12 characters)\n"
    doc = json.loads(cli("ls", "--json", "--tag", "paper", home=home).stdout)[0]
    assert doc["tags"] == ["paper", "cifar"] and doc["notes"] == "the good one"
    cli("tag", "fair", "cifar", "--remove", home=home)
    assert json.loads((home / "runs" / "20260101-000001-bbbbbb" / "meta.json").read_text())["tags"] == ["paper"]
    declined = fairtui_cmd("rm", "fair", home=home)  # no --yes, no input: nothing is deleted
    assert declined.returncode != 0 and (home / "runs" / "20260101-000001-bbbbbb").exists()
    assert cli("rm", "fair", "--yes", home=home).returncode == 0
    assert not (home / "runs" / "20260101-000001-bbbbbb").exists()
    assert "fair" not in [d["name"] for d in json.loads(cli("ls", "--json", home=home).stdout)]


def test_a_name_several_runs_share_means_the_newest_with_a_word_and_rm_refuses_it(home):
    """`show fair` with three runs named fair shows the newest and says so on stderr, naming the others; `rm fair`
    cannot be undone, so it refuses to guess: exit 2 listing the runs, none deleted. An id still works."""
    make_run(home, "20260102-000000-dddddd", name="fair", method="cfa", robust_centre=0.5, seed=1)
    make_run(home, "20260103-000000-eeeeee", name="fair", method="cfa", robust_centre=0.5, seed=2)
    shown = cli("show", "fair", "--json", home=home)
    assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == "20260103-000000-eeeeee"
    assert ("3 runs are named fair: this is the newest, 20260103-000000-eeeeee (the others: "
            "20260102-000000-dddddd, 20260101-000001-bbbbbb; give an id for one of them)") in shown.stderr
    assert "runs are named" not in cli("show", "base", home=home).stderr  # a name of one run: nothing said
    refused = cli("rm", "fair", "--yes", home=home)
    assert refused.returncode == 2 and "'fair' names 3 runs" in refused.stderr and "give one by its id" in refused.stderr
    assert all((home / "runs" / i).is_dir() for i in ("20260101-000001-bbbbbb", "20260102-000000-dddddd",
                                                        "20260103-000000-eeeeee"))
    assert cli("rm", "20260102-000000-dddddd", "--yes", home=home).returncode == 0
    assert not (home / "runs" / "20260102-000000-dddddd").exists()
    assert "2 runs are named fair" in cli("tag", "fair", "x", home=home).stderr


def test_stop_a_real_run(tmp_path, tiny_profile):
    import time

    home = tmp_path / "home"
    started = fairtui_cmd("run", str(tiny_profile()), "--set", "train.epochs=200", "--detach", "--json", home=home)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    events = home / "runs" / run_id / "events.jsonl"
    deadline = time.time() + HANG_S
    while time.time() < deadline and (not events.exists() or '"epoch_end"' not in events.read_text()):
        time.sleep(0.1)
    assert json.loads(cli("ls", "--json", home=home).stdout)[0]["status"] == "running"
    stopped = cli("stop", run_id, home=home)
    assert stopped.returncode == 0 and "stopped" in stopped.stderr
    doc = json.loads(cli("ls", "--json", home=home).stdout)[0]
    assert doc["status"] == "stopped"
    assert cli("stop", run_id, home=home).returncode == 2  # not running any more


def test_home_before_the_command(home):
    import subprocess
    import sys

    from tests.conftest import ROOT, engine_env

    out = subprocess.run([sys.executable, "-m", "fairtui.cli", "--home", str(home), "ls", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=engine_env(), timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == 3


WAT_STATE = {"weights": [0.0909090909090909] * 11, "val_cost": [1.2345678901234567 + i for i in range(11)],
             "val_cost_sum": [12.345678901234567 * (i + 1) for i in range(11)],
             "next_weights": [0.09090909090909091] * 11}
FRL_STATE = {"phase": "frl", **{key: [0.012345678901234567 * i for i in range(10)] for key in (
    "clean_err_per_class", "bndy_err_per_class", "lambda_nat", "lambda_bndy", "weight_nat", "weight_bndy",
    "eps_per_class", "lambda_margin")}}


@pytest.mark.parametrize("method, state", [("wat", WAT_STATE), ("frl", FRL_STATE)])
def test_show_prints_the_method_state_as_labelled_tables_at_80_columns(tmp_path, method, state):
    """WAT's K + 1 vectors get an 'overall' row first; every vector is a labelled, rounded column; nothing
    is wider than the terminal (tables are split instead)."""
    make_run(tmp_path, "20260101-000000-aaaaaa", name="a-run-with-a-rather-long-name", method=method,
             method_state=state)
    out = fairtui_cmd("show", "aaaaaa", home=tmp_path, env_extra={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "12345678901" not in out.stdout  # rounded, no raw 17-digit floats
    for key in (k for k, v in state.items() if isinstance(v, list)):
        assert any(key in line for line in lines), key
    rows = [line for line in lines if line.startswith("│ ") or line.startswith("┃ ")]
    if method == "wat":
        assert any(row.split("│")[1].strip() == "overall" for row in rows if "│" in row)
        assert "1.235" in out.stdout and "0.09091" in out.stdout
    else:
        assert "phase: frl" in out.stdout
    assert "method state after epoch 5" in out.stdout


def test_subset_results_are_whole_per_class_tables_in_show_and_the_app(tmp_path):
    """`show` and the app's per-class screen (`p`) draw a subset result as a per-class table of its own,
    titled as exploratory with what differs, not as one summary line."""
    from fairtui.runs.report import exploratory_tables
    from fairtui.runs.runfolder import RunView

    run = make_run(tmp_path, "20260101-000000-aaaaaa", name="a")
    subset_result(run, "aa", 10, 0.4)
    tables = exploratory_tables(RunView.load(run))
    assert len(tables) == 1 and tables[0].title.startswith("exploratory (10 per class): a [")
    assert [c.header for c in tables[0].columns] == ["class", "clean", "robust aa"]
    assert tables[0].row_count == 10 + 5  # every class, then the summary rows
    shown = cli("show", "a", home=tmp_path).stdout
    assert "exploratory (10 per class)" in shown and "robust aa" in shown


HOSTILE = "evil\x1b[2J\x1b]0;pwned\x07[bold red]x[/]"


def test_names_tags_and_notes_refuse_control_characters_and_overlong_names(tmp_path, tiny_profile):
    """At input: exit 2, one line, nothing created or changed."""
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="a")
    for args in (["run", str(tiny_profile()), "--name", HOSTILE], ["run", str(tiny_profile()), "--name", "x" * 201],
                 ["run", str(tiny_profile()), "--tag", "a\nb"], ["tag", "a", "ok", "bad\x1b"],
                 ["note", "a", "line\x1b[2J"]):
        out = cli(*args, home=home)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "\x1b" not in out.stderr, args
    assert [p.name for p in (home / "runs").iterdir()] == ["20260101-000000-aaaaaa"]
    meta = json.loads((home / "runs" / "20260101-000000-aaaaaa" / "meta.json").read_text())
    assert meta.get("tags") == [] and not meta.get("notes")
    assert cli("note", "a", "two\nlines\tand a tab", home=home).returncode == 0  # a note's own newlines


def test_what_a_home_already_holds_is_printed_inert(tmp_path):
    """A name, tag and note written before the rule (or by hand) never reach the terminal as escapes or
    markup: ls, show and compare print them with visible escapes."""
    home = tmp_path / "home"
    a = make_run(home, "20260101-000000-aaaaaa", name="a")
    make_run(home, "20260101-000001-bbbbbb", name="b")
    meta = json.loads((a / "meta.json").read_text())
    meta.update(name=HOSTILE, tags=["t\x1bx"], notes="n\x1b]0;x\x07")
    (a / "meta.json").write_text(json.dumps(meta))
    for args in (["ls"], ["show", "aaaaaa"], ["compare", "aaaaaa", "bbbbbb"], ["ls", "--wide"]):
        out = cli(*args, home=home)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout and "\x07" not in out.stdout, args
        assert "\\x1b" in out.stdout, args
        assert "[bold red]x[/]" in out.stdout, args  # the markup is shown as text, not applied


def test_rm_of_a_linked_run_removes_the_link_and_leaves_its_target(tmp_path):
    home = tmp_path / "home"
    elsewhere = make_run(tmp_path / "elsewhere", "20260101-000000-aaaaaa", name="linked")
    (home / "runs").mkdir(parents=True)
    (home / "runs" / "20260101-000000-aaaaaa").symlink_to(elsewhere, target_is_directory=True)
    out = cli("rm", "linked", "--yes", home=home)
    assert out.returncode == 0 and "Traceback" not in out.stderr and "removed the link" in out.stderr
    assert not (home / "runs" / "20260101-000000-aaaaaa").exists() and (elsewhere / "events.jsonl").exists()


def test_a_stop_in_the_first_moment_of_a_run_is_recorded(tmp_path, tiny_profile):
    """`fairtui stop` right after `run --detach`, before the engine has its signal handler: the run ends
    `stopped` with its record (a SIGTERM then used to kill it with nothing written: `lost`)."""
    from engine.contract.profile_io import load_profile
    from fairtui.launch.control import stop_run
    from fairtui.runs.home import resolve_home
    from fairtui.launch.launcher import create_run, start_engine
    from fairtui.runs.runfolder import RunView

    home = resolve_home(str(tmp_path / "home"))
    run_dir = create_run(home, load_profile(tiny_profile(), ["train.epochs=50"]), "tiny.toml", None, [], None)
    old = dict(os.environ)
    os.environ.update({"PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""})
    try:
        proc = start_engine(run_dir)
    finally:
        os.environ.clear()
        os.environ.update(old)
    status = stop_run(run_dir, wait=True, timeout=HANG_S)  # at once: the engine is still importing
    assert proc.wait(timeout=HANG_S) == 130
    assert status == "stopped"
    fin = RunView.load(run_dir).finished
    assert fin and fin["status"] == "stopped"
    assert not (run_dir / "stop.requested").exists()


def test_a_hung_engine_is_killed_by_stop_now_or_a_second_stop_and_resumes(tmp_path, tiny_profile):
    """An engine that hangs (here: SIGSTOP, which holds a graceful stop's signal pending for ever) ignores
    `fairtui stop`; `stop --now`, or a second `stop`, kills its process group after saying so. The run ends
    stopped, marked killed, keeps its last checkpoint, and `resume` continues to the end."""
    import signal
    import time

    from fairtui.runs.runfolder import RunView

    home = tmp_path / "home"
    for second_stop in (False, True):
        started = fairtui_cmd("run", str(tiny_profile()), "--set", "train.epochs=6", "--name", f"hung{second_stop}",
                              "--detach", "--json", home=home)
        assert started.returncode == 0, started.stderr
        run_id = json.loads(started.stdout)["run_id"]
        run_dir = home / "runs" / run_id
        deadline = time.time() + HANG_S
        events_path = run_dir / "events.jsonl"
        while time.time() < deadline and (not events_path.exists() or '"epoch_end"' not in events_path.read_text()):
            time.sleep(0.1)
        pid = json.loads((run_dir / "engine.json").read_text())["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            if second_stop:
                first = cli("stop", run_id, "--no-wait", home=home)  # asked: the hung engine does not act on it
                assert first.returncode == 0 and "stopping" in first.stderr, first.stderr
                time.sleep(1.0)
                out = cli("stop", run_id, home=home)
                assert "it was asked to stop before and still runs" in out.stderr
            else:
                out = cli("stop", run_id, "--now", home=home)
                assert "killing its engine (SIGKILL, --now)" in out.stderr
        finally:
            try:
                os.kill(pid, signal.SIGCONT)  # in case it still lives
            except ProcessLookupError:
                pass
        assert out.returncode == 0 and "stopped (killed)" in out.stderr, out.stderr
        assert out.stderr.index("killing its engine") < out.stderr.index("stopped (killed)")  # said before done
        # recorded beside the stream (the engine is its one writer), read as the session's end by every reader
        assert '"run_finished"' not in (run_dir / "events.jsonl").read_text()
        finished = RunView.load(run_dir).finished
        assert finished["type"] == "run_finished" and finished["status"] == "stopped" and finished["killed"]
        shown = json.loads(cli("show", run_id, "--json", home=home).stdout)
        assert shown["status"] == "stopped" and "killed (SIGKILL)" in shown["error"]
        assert not (run_dir / "stop.requested").exists()
        resumed = cli("resume", run_id, home=home)
        assert resumed.returncode == 0, resumed.stderr
        assert not (run_dir / "ended.json").exists()  # the resumed engine cleared it as it started
        assert RunView.load(run_dir).status() == "completed"
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"
        assert max(e["epoch"] for e in events if e["type"] == "epoch_end") == 6


def test_version_names_fairtui_its_commit_python_and_torch(tmp_path):
    from importlib import metadata

    from fairtui import __version__
    from tests.conftest import fairtui_cmd

    out = fairtui_cmd("--version", home=tmp_path / "home")
    assert out.returncode == 0 and out.stdout.startswith(f"fairtui {__version__}")
    assert f"torch {metadata.version('torch')}" in out.stdout and "Python 3." in out.stdout
    assert not (tmp_path / "home").exists()


def test_tag_note_rm_stop_and_reindex_print_one_json_document_with_json(tmp_path):
    from fairtui.runs.synthetic import make_run
    from tests.conftest import fairtui_cmd

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="a")
    make_run(home, "20260101-000001-bbbbbb", name="b")
    docs = {}
    for args in (("tag", "a", "x", "y"), ("note", "a", "hello"), ("reindex",), ("rm", "b", "--yes")):
        out = fairtui_cmd(*args, "--json", home=home)
        assert out.returncode == 0, (args, out.stderr)
        docs[args[0]] = json.loads(out.stdout)  # one document, nothing else on stdout
    assert docs["tag"]["tags"] == ["x", "y"] and docs["note"]["notes"] == "hello"
    assert docs["reindex"] == {"indexed": 2, "dropped": 0} and docs["rm"]["deleted"] is True
    refused = fairtui_cmd("stop", "a", "--json", home=home)  # a finished run: refused, its one document the error
    assert refused.returncode == 2 and "not running" in refused.stderr
    assert json.loads(refused.stdout) == {"error": "run 20260101-000000-aaaaaa is not running (status completed)",
                                          "message": None, "exit": 2}
    assert not (home / "runs" / "20260101-000001-bbbbbb").exists()


def test_a_misspelt_status_is_refused_with_the_close_one(tmp_path):
    from tests.conftest import fairtui_cmd

    out = fairtui_cmd("ls", "--status", "runing", home=tmp_path / "home")
    assert out.returncode == 2 and "did you mean 'running'?" in out.stderr and out.stdout == ""




def test_rm_refuses_the_start_of_a_live_fine_tune_or_study(tmp_path):
    """#71 item 8: deleting a run that a queued fine-tune, or a study whose driver is running, starts from would fail
    them (a FAAL study spent its budget on trials failing on the missing base). `rm` names them and refuses;
    `--force` deletes; a finished fine-tune or an ended study does not hold the base."""
    from engine.contract.locks import try_lock

    home = tmp_path / "home"
    base = make_run(home, "20260101-000000-base01", name="base")
    waiting = make_run(home, "20260101-000001-fine01", name="fine", status="running", init_from=str(base))
    (waiting / "queued").touch()
    make_run(home, "20260101-000002-trial0", name="trial", init_from=str(base / "checkpoints" / "best.pt"),
             tags=("study:faal-lr",))
    (home / "studies").mkdir()
    driver = try_lock(home / "studies" / "faal-lr.driver")  # the study's driver is running
    refused = fairtui_cmd("rm", "base", "--yes", home=home)
    assert refused.returncode == 2 and base.is_dir()
    assert "run fine [20260101-000001-fine01] (queued) fine-tunes from it" in refused.stderr
    assert "study faal-lr (its driver is running)" in refused.stderr and "--force" in refused.stderr
    (waiting / "queued").unlink()
    (waiting / "events.jsonl").write_text((waiting / "events.jsonl").read_text() + json.dumps(
        {"v": 1, "seq": 99, "t": 0, "run_id": waiting.name, "type": "run_finished", "status": "completed"}) + "\n")
    still = fairtui_cmd("rm", "base", "--yes", home=home)
    assert still.returncode == 2 and "fine [" not in still.stderr and "study faal-lr" in still.stderr
    driver.close()  # the study ended: nothing holds the base any more
    assert fairtui_cmd("rm", "base", "--yes", home=home).returncode == 0 and not base.exists()


def test_rm_force_deletes_the_start_of_a_live_fine_tune(tmp_path):
    home = tmp_path / "home"
    base = make_run(home, "20260101-000000-base01", name="base")
    waiting = make_run(home, "20260101-000001-fine01", name="fine", status="running", init_from=str(base))
    (waiting / "queued").touch()
    assert fairtui_cmd("rm", "base", "--yes", "--force", home=home).returncode == 0 and not base.exists()
