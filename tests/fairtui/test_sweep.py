"""Sweeps: grids x seeds through the local queue and through submitit (local executor); bad input."""

import json
import statistics
import sys
import time

import pytest

from fairtui.launch.sweep import build_spec, expand, split_profile
from tests.conftest import HANG_S, TINY, fairtui_cmd

FAST = TINY.replace("train_per_class = 30", "train_per_class = 20").replace("epochs = 2", "epochs = 1")


def test_local_grid_of_2x2_with_2_seeds(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text(FAST.replace("threads = 1\n", ""))  # the thread count left to the sweep
    home = tmp_path / "home"
    out = fairtui_cmd("sweep", str(profile), "--grid", "attack.eps=0.1,0.2", "--grid", "method.name=pgd_at,trades",
                      "--seeds", "2", "--per-gpu", "2", "--gpus", "cpu", "--json", home=home)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["runs"]) == 8 and set(doc["statuses"].values()) == {"completed"}
    # on the CPU the children train with one thread each, side by side in the CPU's slots; the run says its threads
    assert "on the CPU: one thread a run" in out.stderr
    from engine.contract.profile_io import read_toml

    assert {read_toml(home / "runs" / r / "profile.toml")["train"]["threads"] for r in doc["runs"]} == {1}
    started = json.loads((home / "runs" / doc["runs"][0] / "events.jsonl").read_text().splitlines()[0])
    assert started["device"].startswith("cpu (1 thread of ")
    listed = json.loads(fairtui_cmd("ls", "--json", "--sweep", doc["sweep_id"], home=home).stdout)
    assert len(listed) == 8 and all(f"sweep:{doc['sweep_id']}" in d["tags"] for d in listed)
    short = doc["sweep_id"].rsplit("-", 1)[-1]  # the short form the runs table shows
    assert len(json.loads(fairtui_cmd("ls", "--json", "--sweep", short, home=home).stdout)) == 8
    unknown = fairtui_cmd("ls", "--sweep", "nosuch", home=home)
    assert unknown.returncode == 2 and f"no such sweep; known: {doc['sweep_id']}" in unknown.stderr
    table = json.loads(fairtui_cmd("export", "--sweep", doc["sweep_id"], "--format", "json", home=home).stdout)
    assert len(table["rows"]) == 4 and all(len(r["runs"]) == 2 for r in table["rows"])
    for row in table["rows"]:  # mean and std of the two seeds' own numbers
        values = []
        for run_id in row["runs"]:
            events = [json.loads(line) for line in (home / "runs" / run_id / "events.jsonl").read_text().splitlines()]
            best = [e for e in events if e["type"] == "eval_result" and e["checkpoint"] == "best"][0]
            values.append(statistics.mean(best["robust_acc_per_class"]))
        assert row["avg_robust"]["mean"] == pytest.approx(statistics.mean(values))
        assert row["avg_robust"]["std"] == pytest.approx(statistics.stdev(values))
        seeds = {json.loads((home / "runs" / r / "meta.json").read_text())["grid"]["seed"] for r in row["runs"]}
        assert seeds == {0, 1}
    md = fairtui_cmd("export", "--sweep", doc["sweep_id"], "--format", "latex", home=home).stdout
    assert md.count(r"$\pm$") == 4 * 6


@pytest.mark.parametrize("args, message", [
    (["--grid", "method.lambda9=1,2"], "--grid: method.lambda9: unknown key"),
    (["--grid", "attack.eps="], "--grid: attack.eps: the value list is empty"),
    (["--grid", "attack.eps=0.1", "--launcher", "slurm", "--sbatch", "job-name=x"], "fairtui sets it itself"),
    (["--grid", "attack.eps=0.1", "--partition", "gpu", "--nodes", "2"], "--nodes, --partition: only with --launcher slurm"),
    (["--grid", "attack.eps=0.1", "--launcher", "pbs"], "unknown launcher 'pbs'"),
    ([], "nothing to sweep"),
    # what --set makes of the profile is the profile's fault, not a grid's (it said "--grid:" with no grid given)
    (["--seeds", "2", "--set", "method.name=dafa", "--set", "method.warmup_epochs=19"],
     "p.toml: method.warmup_epochs: a warm-up of 19 epochs leaves no DAFA epoch"),
])
def test_bad_sweeps_exit_2_saying_what_to_fix(tmp_path, args, message):
    profile = tmp_path / "p.toml"
    profile.write_text(FAST)
    out = fairtui_cmd("sweep", str(profile), *args, home=tmp_path / "home")
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert not (tmp_path / "home" / "runs").exists()  # nothing was created


def test_sweep_table_in_the_profile_and_run_refuses_it(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text(FAST + '\n[sweep]\nseeds = [0, 5]\n[sweep.grid]\n"method.name" = ["pgd_at", "trades"]\n')
    raw, table = split_profile(profile)
    spec = build_spec(profile, table, [], None, None, None)
    children = expand(profile, raw, spec)
    assert [c.values for c, _ in children] == [{"method.name": "pgd_at", "seed": 0}, {"method.name": "pgd_at", "seed": 5},
                                               {"method.name": "trades", "seed": 0}, {"method.name": "trades", "seed": 5}]
    assert [p.method.name for _, p in children] == ["pgd_at", "pgd_at", "trades", "trades"]
    refused = fairtui_cmd("run", str(profile), home=tmp_path / "home")
    assert refused.returncode == 2 and "run it with `fairtui sweep`" in refused.stderr


def test_slurm_launcher_without_submitit_is_a_clear_error(tmp_path, monkeypatch):
    from engine.contract.profile_schema import ProfileError
    from fairtui.launch.slurm import SlurmSettings, submit_sweep

    monkeypatch.setitem(sys.modules, "submitit", None)
    with pytest.raises(ProfileError, match="pip install 'fairtui\\[slurm\\]'"):
        submit_sweep(tmp_path, {"sweep_id": "s", "runs": []}, SlurmSettings(partition="gpu"))


def test_shared_storage_check():
    from pathlib import Path

    from engine.contract.storage import filesystem_type
    from fairtui.launch.slurm import shared_storage_warning

    fs = filesystem_type(Path("/"))
    assert fs  # this machine's root file system is found in /proc/mounts
    warning = shared_storage_warning(Path("/"))
    assert warning is None or "must see the same folder" in warning


def preempt(job) -> None:
    """What Slurm does to a preempted job: SIGUSR2 to every process of the job's step (the submitit task
    below the local controller, and the engine it started)."""
    import os
    import signal
    from pathlib import Path

    def children(pid: int) -> list[int]:
        found = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text().split()
            found += [int(c) for c in text]
        return found

    tasks = [c for c in children(job._process.pid) if b"submitit" in Path(f"/proc/{c}/cmdline").read_bytes()]
    assert tasks, "no submitit task process found"
    step = tasks + [e for t in tasks for e in children(t)]
    assert len(step) > len(tasks), "no engine process found under the task"
    for pid in step:
        os.kill(pid, signal.SIGUSR2)


def wait(predicate, timeout=HANG_S):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise TimeoutError


def test_submitit_job_array_completes_and_a_preempted_child_resumes(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    from tests.conftest import ROOT

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    from fairtui.runs.runfolder import RunView
    from fairtui.launch.slurm import SlurmSettings, submit_sweep
    from fairtui.runs.store import RunIndex
    from fairtui.launch.sweep_run import create_children

    profile = tmp_path / "p.toml"
    profile.write_text(FAST.replace("epochs = 1", "epochs = 30") + "\n")
    raw, table = split_profile(profile)
    spec = build_spec(profile, table, [], None, [0, 1], "slurm")
    record = create_children(tmp_path, str(profile), expand(profile, raw, spec), spec, "s", "slurm")
    jobs = submit_sweep(tmp_path, record, SlurmSettings(cluster="local", time_min=30, parallelism=2))
    first = tmp_path / "runs" / record["runs"][0]
    wait(lambda: (first / "events.jsonl").exists() and '"epoch_end"' in (first / "events.jsonl").read_text())
    preempt(jobs[0])
    for job in jobs:
        job.wait()
    docs = {d["run_id"]: d for d in RunIndex(tmp_path).read()}
    for run_id, job in zip(record["runs"], jobs):
        assert RunView.load(tmp_path / "runs" / run_id).status() == "completed", job.stderr()
        assert docs[run_id]["slurm_job_id"] == str(job.job_id) and docs[run_id]["launcher"] == "slurm"
    kinds = [json.loads(line)["type"] for line in (first / "events.jsonl").read_text().splitlines()]
    stopped = [json.loads(line).get("status") for line in (first / "events.jsonl").read_text().splitlines()
               ].index("stopped")  # the engine stopped cleanly (not killed by the signal)
    assert "run_resumed" in kinds[stopped:]  # requeued, and continued from its checkpoint
    assert kinds.count("run_started") == 1
    epochs = [json.loads(line)["epoch"] for line in (first / "events.jsonl").read_text().splitlines()
              if '"epoch_end"' in line]
    assert max(epochs) == 30


def test_the_sweep_table_fits_80_columns_with_every_number_whole():
    import io

    from rich.console import Console

    from fairtui.judge.compare import EXPORT_METRICS, ExportRow
    from fairtui.judge.export import terminal_table

    rows = [ExportRow(f"cfa-trades-wrn34-10-lambda1-{lam}", ["a", "b"],
                      {**{k: [0.712, 0.705] for k in EXPORT_METRICS}, "cv": [0.0224, 0.0251]},
                      "pgd20, eps 8/255, whole split")
            for lam in ("0.3", "0.5")]
    buf = io.StringIO()
    Console(file=buf, width=80).print(terminal_table(rows, "best"))
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    number = f"{statistics.mean([0.712, 0.705]) * 100:.1f}±{statistics.stdev([0.712, 0.705]) * 100:.1f}"
    assert sum(line.count(number) for line in lines) == 2 * 5  # clean, robust, worst, worst20%, MCD: whole
    assert sum("cfa-trades" in line for line in lines) == 2
    assert lines[0].startswith("pgd20, eps 8/255, whole split @ best")


def test_a_running_sweep_shows_its_running_childs_progress(tmp_path):
    from fairtui.cli.sweep import child_line
    from fairtui.runs.synthetic import make_run

    run = make_run(tmp_path, "20260101-000000-c1c1c1", name="s1-lr0.1", status="running")
    (run / "progress.json").write_text(json.dumps({"phase": "train", "epoch": 3, "batch": 40, "batches": 100,
                                                   "t": time.time(), "started": time.time() - 40}))
    line = child_line(tmp_path, ["20260101-000000-c1c1c1", "other"])
    assert line.startswith("  s1-lr0.1: ETA 1 min 0") and line.endswith(", train epoch 3 40% (+1 more running)")
    assert child_line(tmp_path, []) == ""
    (run / "progress.json").write_text(json.dumps({"phase": "done", "epoch": 3, "batch": 0, "batches": 0}))
    assert child_line(tmp_path, ["20260101-000000-c1c1c1"]) == "  s1-lr0.1: training done; test evaluation"


def test_the_sweep_bars_keep_their_bars_and_the_start_of_each_line_at_80_columns():
    """#56 item 8: a long child line took the whole width and both rows showed "… …"."""
    import io

    from rich.console import Console

    import fairtui.cli.sweep as sweep_cli

    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    bar = sweep_cli.sweep_bars(console)
    bar.add_task("sweep 20261127-121212-abcdef (2 running)", total=8, completed=3)
    bar.add_task("  digits-at-method.eta=0.1-s0: ETA 12 s, train epoch 3 40% (+1 more running)", total=None)
    console.print(bar.make_tasks_table(bar.tasks))
    first, second = out.getvalue().splitlines()[:2]
    assert first.startswith("sweep 20261127-121212-abcdef (2 running)") and "3/8" in first
    assert second.startswith("  digits-at-method.eta=0.1-s0: ETA 12 s") and len(second.rstrip()) <= 80


def test_a_grid_over_seeds_gives_one_child_per_seed(tmp_path):
    """`--grid seed=1,2` is a sweep over seeds (it used to give two children with the profile's seed)."""
    profile = tmp_path / "p.toml"
    profile.write_text(FAST)  # seed = 3
    raw, table = split_profile(profile)
    spec = build_spec(profile, table, ["seed=1,2", "attack.eps=0.1,0.2"], None, None, None)
    children = expand(profile, raw, spec)
    assert sorted((c.values["attack.eps"], p.seed) for c, p in children) == [(0.1, 1), (0.1, 2), (0.2, 1), (0.2, 2)]
    assert all(c.values["seed"] == p.seed for c, p in children)
    with pytest.raises(Exception, match="give the seeds once"):
        build_spec(profile, table, ["seed=1,2"], 3, None, None)
    with pytest.raises(Exception, match="seeds are whole numbers"):
        build_spec(profile, table, ["seed=1.5"], None, None, None)
