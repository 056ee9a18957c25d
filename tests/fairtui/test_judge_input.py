"""#83 item 3: every bad input to `fairtui judge` is refused in one line with exit 2 before anything exists (no run,
no record, no queue entry), and a --json document carries the true exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, fairtui_cmd

QUICK = ROOT / "experiments" / "results" / "cifar10-cpu-quick"
PROFILE = ROOT / "profiles" / "cifar10-cpu-quick-trades.toml"


@pytest.fixture
def data_root(tmp_path) -> Path:
    root = tmp_path / "data"
    (root / "cifar-10-batches-py").mkdir(parents=True)
    (root / "cifar-10-batches-py" / "test_batch").write_bytes(b"")
    return root


CASES = {
    "a huge seed range": (["--seeds", "0-100000000"], "at most 1000 seeds a judgement"),
    "a seed past the generators": (["--seeds", "99999999999999999999"], "a seed is at most 2147483647"),
    "a huge --max-seeds": (["--until-decided", "--max-seeds", "1000000000"], "--max-seeds 1000000000: give 2 to 1000"),
    "a --gpus that is no index": (["--gpus", "x;touch PWN"], "give GPU indices (0,1) or cpu"),
    "a GPU this machine lacks": (["--gpus", "99"], "not GPU 99; --gpus cpu trains on the CPU"),
    "no data where data.root says": (["--set", "data.root=/nonexistent"], "data.root: '/nonexistent' does not exist"),
    "the batches folder for its parent": (["--set", "data.root={root}/cifar-10-batches-py"],
                                          "is the data set's own folder; give the folder that holds it: --set "
                                          "data.root={root}"),
    "no robust attack to judge on": (["--set", 'eval.attacks=["clean"]'], "eval.attacks: has no robust attack"),
}


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: c.replace(" ", "-"))
def test_bad_input_is_one_line_and_exit_2_with_nothing_made(case, tmp_path, data_root):
    extra, said = CASES[case]
    extra = [x.replace("{root}", str(data_root)) for x in extra]
    said = said.replace("{root}", str(data_root))
    home = tmp_path / "home"
    args = ["judge", str(PROFILE), "--set", "method.beta=3", "--set", f"data.root={data_root}", "--baseline",
            "cifar10-cpu-quick-trades", "--results", str(QUICK), "--checkpoint", "last", *extra]
    out = fairtui_cmd(*args, home=home)
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("fairtui: ")]
    assert len(errors) == 1 and said in errors[0], out.stderr
    assert "Traceback" not in out.stderr
    assert not home.exists() or not any(p.is_file() for p in home.rglob("*") if p.name != "runs.json"), \
        sorted(str(p) for p in home.rglob("*"))
    doc = json.loads(fairtui_cmd(*args, "--json", home=home).stdout)
    assert doc["exit"] == 2 and said in doc["error"]


def test_a_crash_under_json_says_exit_1_as_the_process_does(tmp_path, monkeypatch):
    """The --json document of a command that ended in a traceback carries 1, not 0 (it said "exit": 0)."""
    import subprocess
    import sys

    from tests.conftest import engine_env

    code = ("import sys, fairtui.cli as c\n"
            "def boom(): raise RuntimeError('boom')\n"
            "c._main = boom\n"
            "sys.argv = ['fairtui', 'ls', '--json']\n"
            "c.main()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=engine_env(), cwd=ROOT,
                         timeout=120)
    assert out.returncode == 1
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["exit"] == 1


def test_the_key_holds_what_decides_the_verdict_and_not_where_the_data_lies(tmp_path, data_root):
    """#83 item 2: data.root is a location (two folders, one judgement); the checkpoint, the metric and the
    baseline's committed runs decide the verdict (each another judgement, never one record followed by another)."""
    import shutil

    from fairtui.campaign.spec import Request, build_spec

    other_root = tmp_path / "elsewhere"
    shutil.copytree(data_root, other_root)
    home = tmp_path / "home"

    def key(**changes) -> str:
        base = dict(profile=str(PROFILE), baseline="cifar10-cpu-quick-trades", results=[str(QUICK)],
                    overrides=["method.beta=3", f"data.root={data_root}"], checkpoint="last", baseline_cpu="committed")
        return build_spec(Request(**{**base, **changes}), home).key

    first = key()
    assert key(overrides=["method.beta=3", f"data.root={other_root}"]) == first
    assert key(checkpoint="best") != first
    assert key(metric="avg_robust") != first
    with pytest.raises(ValueError, match="no group of the runs searched"):
        key(results=[], baseline="cifar10-cpu-quick-trades-nope")
    assert key(overrides=["method.beta=4", f"data.root={data_root}"]) != first


def test_the_baseline_names_the_committed_group_when_a_variant_of_it_sits_in_the_home(tmp_path):
    """#83 item 8: a user's own run of the baseline's profile with another setting makes the committed group's label
    'NAME (key=value)'; --baseline NAME still names the committed group, and says so."""
    import shutil

    from fairtui.campaign.spec import find_baseline
    from tests.fairtui.test_groups import write_run

    results, scratch, home = tmp_path / "results", tmp_path / "scratch", tmp_path / "home"
    for seed in range(3):
        write_run(results, "cpu-dafa", f"20260101-00000{seed}-dafa{seed:02d}", seed, [0.2, 0.4, 0.5, 0.6])
    mine = write_run(scratch, "cpu-dafa", "20261201-000000-mine00", 0, [0.3, 0.4, 0.5, 0.6],
                     train={"epochs": 30, "lr": 0.1, "schedule": "piecewise", "milestones": ["75%"]})
    (home / "runs").mkdir(parents=True)
    shutil.move(str(mine), home / "runs" / mine.name)
    said: list[str] = []
    label, views, _, _ = find_baseline("cpu-dafa", [str(results)], home, said.append)
    assert label.startswith("cpu-dafa (") and len(views) == 3
    assert all("/results/" in str(v.run_dir) for v in views)
    assert any("the committed group" in line for line in said)


def test_a_judgements_runs_are_named_with_what_they_change_and_ls_keeps_their_ends():
    """#83 item 8: the user's lambda 2 is never 'cifar10-cpu-quick-dafa-s1', the committed run's name; ls cuts a long
    name in its middle, so the seed and the change stay in view."""
    from fairtui.campaign.spec import run_stem
    from fairtui.cli.ls import cut_middle

    assert run_stem("cifar10-cpu-quick-dafa", ["method.dafa_lambda=2"], "dafa") == "cifar10-cpu-quick-dafa-lambda2"
    assert run_stem("cifar10-cpu-quick-trades", ["method.beta=3.0", "train.lr=0.1"], "trades") == \
        "cifar10-cpu-quick-trades-beta3-lr0.1"
    assert run_stem("tiny", [], "trades") == "tiny"
    a, b = (cut_middle(f"cifar10-cpu-quick-dafa{x}-s1", 20) for x in ("-lambda2", ""))
    assert len(a) == 20 and a.endswith("lambda2-s1"[-9:]) and a != b and b.endswith("-s1")
    assert cut_middle("short-s1", 20) == "short-s1"


def test_the_next_look_is_said_from_the_running_method_runs_time_left(tmp_path):
    """#83 item 8: the command line says when the next look comes: the soonest running method run's time left."""
    import time

    from fairtui.campaign.report import next_look_text
    from fairtui.runs.runstate import format_seconds

    def run(name: str, seed: int, done: int, epoch_s: float) -> Path:
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        now = time.time()
        events = [{"v": 1, "seq": 0, "t": now, "run_id": name, "type": "run_started", "seed": seed,
                   "config": {"name": "m", "seed": seed, "train": {"epochs": 10}}, "num_classes": 2,
                   "class_names": ["a", "b"], "device": "cpu"}]
        events += [{"v": 1, "seq": i + 1, "t": now, "run_id": name, "type": "epoch_end", "epoch": i + 1, "lr": 0.1,
                    "time_s": epoch_s} for i in range(done)]
        (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        (run_dir / "meta.json").write_text(json.dumps({"run_id": name, "judge": {"seed": seed, "role": "method"}}))
        return run_dir

    slow, fast = run("slow", 1, 2, 60.0), run("fast", 3, 6, 30.0)
    text = next_look_text([slow, fast], {"slow", "fast"})
    assert text.startswith("next look in about ") and "(seed 3's pair)" in text
    assert format_seconds(4 * 30.0) in text or format_seconds(4 * 30.0 - 1) in text
    assert next_look_text([], set()) == "next look: when a run starts"
    assert next_look_text([], set(), queued=2).startswith("waiting: 2 run(s) of this judgement queued behind")
    assert next_look_text([slow], set()).startswith("next look: after")  # a baseline's run alone


def test_a_command_that_differs_from_a_judgement_starts_its_own_and_says_so(tmp_path, data_root):
    """#83 item 2: the same method against the same baseline, read at another checkpoint, is another judgement (its
    key holds the checkpoint); the command names the existing one and what differs, before it creates anything."""
    from fairtui.campaign.judging import Campaign
    from fairtui.campaign.spec import Request, build_spec, sibling_judgements

    home = tmp_path / "home"
    base = dict(profile=str(PROFILE), baseline="cifar10-cpu-quick-trades", results=[str(QUICK)],
                overrides=["method.beta=3", f"data.root={data_root}"], baseline_cpu="committed")
    first = build_spec(Request(**base, checkpoint="last"), home)
    Campaign(home, first)  # its record
    second = build_spec(Request(**base, checkpoint="best"), home)
    assert second.key != first.key
    (line,) = sibling_judgements(home, second)
    assert f"exists, {first.key}: checkpoint 'last' (this one: 'best')" in line and second.key in line


def test_a_mistyped_baseline_label_names_the_groups_not_a_profiles_settings(tmp_path, data_root):
    """#88 item 3: `--baseline trades` beside committed groups was read as profiles/trades.toml and refused on its
    eval settings; it is a group's label mistyped: the groups are named, with the closest."""
    home = tmp_path / "home"
    out = fairtui_cmd("judge", str(PROFILE), "--set", "method.beta=3", "--set", f"data.root={data_root}", "--baseline",
                      "trades", "--results", str(QUICK), "--checkpoint", "last", home=home)
    assert out.returncode == 2
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("fairtui: ")]
    assert "--baseline 'trades': no group of that label" in line and "cifar10-cpu-quick-trades" in line
    assert "profiles/trades.toml" in line
