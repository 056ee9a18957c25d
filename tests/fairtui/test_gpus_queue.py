"""GPU inventory at its boundary (NVML and nvidia-smi faked) and the per-GPU run queue."""

import sys
import types

import pytest

from fairtui.launch import gpus
from fairtui.launch.launcher import GpuChoice
from fairtui.launch.queue import LocalQueue, devices_of
from fairtui.runs.synthetic import make_run
from tests.conftest import HANG_S

SMI = """0, NVIDIA A100-SXM4-80GB, 1024, 81920, 37
1, NVIDIA A100-SXM4-80GB, 0, 81920, [N/A]
garbage line
"""


def test_parse_nvidia_smi():
    found = gpus.parse_nvidia_smi(SMI)
    assert [g.index for g in found] == [0, 1]
    assert found[0].memory_used_mib == 1024 and found[0].utilization_pct == 37
    assert found[1].utilization_pct == 0.0
    assert "GPU 0: NVIDIA A100-SXM4-80GB  1024/81920 MiB  37%" == found[0].label()


def test_nvml_first_then_smi_then_cpu_only(monkeypatch):
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"Fake H100",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=2 * 2**30, total=80 * 2**30),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=55))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    (g,) = gpus.inventory()
    assert (g.name, g.memory_used_mib, g.memory_total_mib, g.utilization_pct) == ("Fake H100", 2048, 81920, 55)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: fall back to nvidia-smi
    monkeypatch.setattr(gpus, "from_nvidia_smi", lambda: gpus.parse_nvidia_smi(SMI))
    assert len(gpus.inventory()) == 2
    monkeypatch.setattr(gpus, "from_nvidia_smi", lambda: (_ for _ in ()).throw(FileNotFoundError("nvidia-smi")))
    assert gpus.inventory() == []


def test_queue_respects_per_gpu_limit_and_order(tmp_path, monkeypatch):
    queue = LocalQueue(tmp_path, per_gpu=1)
    started: list[str] = []

    def fake_start(run_dir, choice):
        started.append(run_dir.name)

    running = {"0": 0, "1": 0}
    monkeypatch.setattr(queue, "usage", lambda: (dict(running), 0))
    runs = [make_run(tmp_path, f"r{i}", status="running") for i in range(4)]
    queue.submit(runs[0], GpuChoice(devices=(0,)))
    queue.submit(runs[1], GpuChoice(devices=(0,)))
    queue.submit(runs[2], GpuChoice(devices=(1,)))
    queue.submit(runs[3], GpuChoice(devices=(0, 1)))
    assert queue.tick(start=fake_start) == ["r0", "r2"]  # r1 waits for GPU 0, r3 for both
    running.update({"0": 1, "1": 1})
    assert queue.tick(start=fake_start) == []
    running.update({"0": 0, "1": 1})
    assert queue.tick(start=fake_start) == ["r1"]  # in order: r1 before r3
    running.update({"0": 0, "1": 0})
    assert queue.tick(start=fake_start) == ["r3"]
    assert queue.entries() == [] and not (runs[3] / "queued").exists()


def test_an_engine_still_starting_holds_its_device(tmp_path):
    """An engine holds its run's engine.lock from before it exists and writes engine.json only once torch has
    loaded: seconds on a busy CPU. The next tick must count it, or a sweep's children start one a tick, all at
    once (18 digits runs on 2 cores, seen on 2026-11-27)."""
    from fairtui.launch.launcher import hold_engine_lock

    queue = LocalQueue(tmp_path, per_gpu=1)
    held, started = [], []

    def slow_start(run_dir, choice):  # the lock handed down, no engine.json yet
        held.append(hold_engine_lock(run_dir))
        started.append(run_dir.name)

    runs = [make_run(tmp_path, f"s{i}", status="queued") for i in range(3)]
    for run in runs:
        (run / "engine.json").unlink(missing_ok=True)
        queue.submit(run, None, pool=["cpu"])
    assert queue.tick(start=slow_start) == ["s0"]
    assert queue.busy() == {"cpu": 1}
    assert queue.tick(start=slow_start) == [] and started == ["s0"]
    held.pop().close()  # the engine ended (it never wrote engine.json: it failed as it started)
    assert queue.tick(start=slow_start) == ["s1"]


def test_the_queue_survives_the_process(tmp_path):
    run = make_run(tmp_path, "r0", status="running")
    LocalQueue(tmp_path).submit(run, GpuChoice(cpu=True))
    assert [e["run_id"] for e in LocalQueue(tmp_path).entries()] == ["r0"]
    assert devices_of("cpu") == ["cpu"] and devices_of("0,3") == ["0", "3"] and devices_of(None) == ["cpu"]


def test_the_worker_starts_what_is_queued_and_exits_when_the_queue_is_empty(tmp_path):
    from fairtui.launch.queue import WORKER_LOCK, _try_worker_lock, run_worker

    runs = [make_run(tmp_path, f"r{i}", status="stopped") for i in range(3)]
    queue = LocalQueue(tmp_path)
    for run in runs:
        queue.submit(run, GpuChoice(cpu=True))
    started: list[str] = []
    assert run_worker(tmp_path, per_gpu=5, interval=0.01, start=lambda d, c: started.append(d.name)) == 0
    assert started == ["r0", "r1", "r2"] and queue.entries() == []
    lock = _try_worker_lock(tmp_path)  # the exiting worker gave its lock back
    assert lock is not None and (tmp_path / WORKER_LOCK).exists()
    # While a worker holds the lock, another exits at once without starting anything.
    queue.submit(make_run(tmp_path, "r3", status="stopped"), GpuChoice(cpu=True))
    assert run_worker(tmp_path, interval=0.01, start=lambda d, c: started.append(d.name)) == 0
    assert started == ["r0", "r1", "r2"] and [e["run_id"] for e in queue.entries()] == ["r3"]
    lock.close()


@pytest.mark.parametrize("moment", ["during its tick", "after its last look"])
def test_a_submit_racing_with_the_workers_exit_is_never_stranded(tmp_path, monkeypatch, moment):
    """Another process submits just as the worker is about to exit. Either the worker still sees the
    entry and starts it, or it had already given its lock back (under the queue lock) and the submit
    starts a new worker: never neither."""
    import contextlib

    from fairtui.launch import queue as queue_mod

    spawned: list[int] = []
    started: list[str] = []
    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: spawned.append(1))
    real_locked = LocalQueue._locked
    calls = {"n": 0}
    trigger = 1 if moment == "during its tick" else 2  # the worker's 1st queue access is its tick

    def racing_locked(self):
        calls["n"] += 1
        n = calls["n"]
        with real_locked(self) as entries:
            yield entries
        if n == trigger:  # the queue lock is free again: another process submits now
            monkeypatch.setattr(LocalQueue, "_locked", real_locked)
            LocalQueue(tmp_path, worker=True).submit(make_run(tmp_path, "late", status="stopped"),
                                                     GpuChoice(cpu=True))
            monkeypatch.setattr(LocalQueue, "_locked", contextlib.contextmanager(racing_locked))

    monkeypatch.setattr(LocalQueue, "_locked", contextlib.contextmanager(racing_locked))
    assert queue_mod.run_worker(tmp_path, interval=0.01, start=lambda d, c: started.append(d.name)) == 0
    if moment == "during its tick":
        assert started == ["late"] and spawned == []  # this worker saw it and started it
    else:
        assert started == [] and spawned == [1]  # it had left: the submit started a new worker
        assert [e["run_id"] for e in LocalQueue(tmp_path).entries()] == ["late"]


def test_a_resumed_run_waiting_in_the_queue_is_listed_as_queued(tmp_path):
    from fairtui.runs.store import RunIndex

    run = make_run(tmp_path, "20260101-000000-aaaaaa", status="stopped")
    index = RunIndex(tmp_path)
    assert index.read()[0]["status"] == "stopped"
    LocalQueue(tmp_path).submit(run, GpuChoice(cpu=True))  # the app's `r` while the device is busy
    assert index.read()[0]["status"] == "queued"


@pytest.mark.timeout(300)
def test_a_run_queued_by_a_command_that_quit_still_trains(tmp_path, tiny_profile):
    """No app, no sweep command left open: the detached worker started by the submit runs it, once."""
    import json
    import time

    from tests.conftest import make_run_dir

    home = tmp_path / "home"
    run_dir = make_run_dir(home, tiny_profile(), name="20260101-000000-queued", overrides=("train.epochs=1",))
    (run_dir / "meta.json").write_text(json.dumps({"run_id": run_dir.name, "name": "queued"}))
    for _ in range(2):  # two commands queue it at once: still one worker, and one start
        LocalQueue(home, worker=True).submit(run_dir, GpuChoice(cpu=True))
    deadline = time.time() + HANG_S
    events = run_dir / "events.jsonl"
    while time.time() < deadline and '"run_finished"' not in (events.read_text() if events.exists() else ""):
        time.sleep(0.5)
    types_ = [(e["type"], e.get("status")) for e in map(json.loads, events.read_text().splitlines())]
    assert ("run_finished", "completed") in types_, (home / "queue.worker.log").read_text()[-2000:]
    assert [t for t, _ in types_].count("run_started") == 1
    while time.time() < deadline and LocalQueue(home).entries():
        time.sleep(0.2)
    from fairtui.launch.queue import _try_worker_lock

    for _ in range(50):  # the worker exits once the queue is empty
        lock = _try_worker_lock(home)
        if lock is not None:
            lock.close()
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the queue worker is still running with an empty queue")


def test_a_run_on_several_gpus_starts_one_engine_with_a_rank_per_gpu(tmp_path, monkeypatch):
    """`--gpus 0,1` (run, resume, the queue, the launch dialog) starts the engine with --nproc 2 on
    CUDA_VISIBLE_DEVICES=0,1; one GPU or the CPU starts it as before."""
    import subprocess

    from fairtui.launch import launcher

    calls = []

    class FakePopen:
        pid = 4242

        def __init__(self, command, env, **kw):
            calls.append((command, env.get("CUDA_VISIBLE_DEVICES")))

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for choice in (GpuChoice(devices=(0, 1)), GpuChoice(devices=(3,)), GpuChoice(cpu=True)):
        launcher.start_engine(run_dir, choice)
    (two, two_env), (one, one_env), (cpu, cpu_env) = calls
    assert two[2:] == ["engine", "train", str(run_dir), "--nproc", "2"] and two_env == "0,1"
    assert one[2:] == ["engine", "train", str(run_dir)] and one_env == "3"
    assert cpu[2:] == ["engine", "train", str(run_dir)] and cpu_env == ""
    assert launcher.engine_command(run_dir, 4)[-2:] == ["--nproc", "4"]


def test_a_queued_run_says_what_it_waits_for(tmp_path, monkeypatch):
    """Two CPU runs queued behind a running one: each names its device, what runs there, what is ahead of
    it, and how to allow more (the runs table's status line and the run screen show this)."""
    queue = LocalQueue(tmp_path, per_gpu=1, cores=2)
    monkeypatch.setattr(queue, "usage", lambda: ({"cpu": 1}, 2))
    assert queue.wait_reasons() == {}  # nothing queued: nothing read
    runs = [make_run(tmp_path, f"r{i}", status="running") for i in range(3)]
    queue.submit(runs[0], GpuChoice(cpu=True))
    queue.submit(runs[1], GpuChoice(cpu=True))
    queue.submit(runs[2], GpuChoice(devices=(0,)))
    waits = queue.wait_reasons()
    assert waits["r0"] == "waits for cpu: 2 of 2 cores busy, needs 2, 0 ahead (train.threads)"
    assert waits["r1"].startswith("waits for cpu: 2 of 2 cores busy, needs 2, 1 ahead")
    assert waits["r2"] == "waits for 0: 0 running, 0 ahead (1 a GPU: fairtui --per-gpu N)"


def test_the_cpu_is_as_many_slots_as_cores_and_a_run_takes_its_threads(tmp_path):
    """Item 2 of #70: on 4 cores four one-thread runs start together; a run of train.threads = 0 (one thread a
    core) takes them all and waits for an idle CPU; a two-thread run fits beside two one-thread runs, not three;
    a run asking more threads than the machine has still starts once the CPU is idle (never stranded)."""
    from engine.contract.config import Profile, TrainConfig

    from fairtui.launch.queue import cpu_threads

    def run(name, threads, deterministic=False):
        train = TrainConfig(threads=threads, deterministic=deterministic)
        run_dir = make_run(tmp_path, name, status="running", profile=Profile(name=name, train=train))
        (run_dir / "engine.json").unlink(missing_ok=True)
        return run_dir

    assert cpu_threads(run("t0", 0), 4) == 4 and cpu_threads(run("t8", 8), 4) == 4
    assert cpu_threads(run("d0", 0, deterministic=True), 4) == 1  # the engine's rule: deterministic runs on one
    assert cpu_threads(tmp_path / "runs" / "nothing", 4) == 4  # unreadable: the whole CPU
    started: list[str] = []

    held = {}

    def start(run_dir, choice):  # an engine starting: it holds the run's lock (as in the test above)
        from fairtui.launch.launcher import change_meta, hold_engine_lock

        change_meta(run_dir, lambda m: m.update(gpus="cpu"))
        held[run_dir.name] = hold_engine_lock(run_dir)
        started.append(run_dir.name)

    queue = LocalQueue(tmp_path, cores=4)
    ones = [run(f"one{i}", 1) for i in range(4)]
    whole = run("whole", 0)
    for r in [*ones, whole]:
        queue.submit(r, GpuChoice(cpu=True))
    assert queue.tick(start=start) == ["one0", "one1", "one2", "one3"]
    assert queue.usage() == ({"cpu": 4}, 4)
    assert queue.tick(start=start) == []  # the all-core run waits for the CPU to be idle
    assert queue.wait_reasons()["whole"].startswith("waits for cpu: 4 of 4 cores busy, needs 4")
    held.pop("one0").close()  # one run ended: one core free, not four
    assert queue.tick(start=start) == []
    for name in ("one1", "one2", "one3"):
        held.pop(name).close()
    assert queue.tick(start=start) == ["whole"] and queue.usage()[1] == 4
    held.pop("whole").close()
    # a two-thread run fits beside two one-thread runs, not beside three; more threads than cores start alone
    mixed = [run("a1", 1), run("b1", 1), run("c2", 2), run("d1", 1), run("e8", 8)]
    for r in mixed:
        queue.submit(r, GpuChoice(cpu=True))
    assert queue.tick(start=start) == ["a1", "b1", "c2"] and queue.usage()[1] == 4
    for name in ("a1", "b1", "c2"):
        held.pop(name).close()
    assert queue.tick(start=start) == ["d1"]  # FIFO: e8 waits behind nothing but the busy core
    held.pop("d1").close()
    assert queue.tick(start=start) == ["e8"]
    held.pop("e8").close()



@pytest.mark.timeout(300)
def test_stop_takes_a_queued_run_off_the_queue_and_resume_queues_it_again(tmp_path, tiny_profile):
    """`fairtui stop` (and the app's `s`) on a run waiting in the queue: it leaves the queue and reads `stopped`,
    nothing deleted; `fairtui resume` then trains it (#73: before, stop answered "not running" and only `d`,
    deleting the run, took it off the queue)."""
    import json

    from fairtui.runs.runfolder import RunView
    from tests.conftest import fairtui_cmd, make_run_dir

    home = tmp_path / "home"
    run_dir = make_run_dir(home, tiny_profile(), name="20260101-000000-waits0", overrides=("train.epochs=1",))
    (run_dir / "meta.json").write_text(json.dumps({"run_id": run_dir.name, "name": "waits"}))
    LocalQueue(home).submit(run_dir, GpuChoice(cpu=True))  # no worker: it waits, as behind a busy device
    assert RunView.load(run_dir).status() == "queued"
    out = fairtui_cmd("stop", "waits", "--json", home=home)
    assert out.returncode == 0, out.stderr
    assert "removed from the queue; it stays stopped" in out.stderr
    assert json.loads(out.stdout)["status"] == "removed from the queue; it stays stopped"
    assert LocalQueue(home).entries() == [] and RunView.load(run_dir).status() == "stopped"
    listed = json.loads(fairtui_cmd("ls", "--json", home=home).stdout)
    assert [r["status"] for r in listed] == ["stopped"]
    again = fairtui_cmd("stop", "waits", home=home)
    assert again.returncode != 0 and "not running (status stopped)" in again.stderr
    resumed = fairtui_cmd("resume", "waits", home=home, timeout=HANG_S)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert RunView.load(run_dir).status() == "completed"


def test_one_limit_per_home_stored_with_the_queue_and_read_by_every_worker(tmp_path, monkeypatch):
    """#73 item 3: a sweep's worker ran with 3 a GPU and the app's with 2, minutes apart. The limit is now the
    home's: stored by whichever command is given --per-gpu, read by every queue of the home at each use."""
    from fairtui.launch import queue as queue_mod
    from fairtui.launch.queue import home_limit, set_home_limit

    assert home_limit(tmp_path) == 1 and LocalQueue(tmp_path).per_gpu == 1
    set_home_limit(tmp_path, 3)
    worker_side, app_side = LocalQueue(tmp_path), LocalQueue(tmp_path, worker=True)
    assert worker_side.per_gpu == app_side.per_gpu == 3
    set_home_limit(tmp_path, 2)  # the app started later with --per-gpu 2: every queue of the home follows
    assert worker_side.per_gpu == app_side.per_gpu == 2
    assert LocalQueue(tmp_path, per_gpu=5).per_gpu == 5  # a study's own --parallel stays its own
    spawned = []
    monkeypatch.setattr("subprocess.Popen", lambda args, **k: spawned.append(args))
    queue_mod.ensure_worker(tmp_path)
    assert spawned and "--per-gpu" not in spawned[0]  # the worker reads the home's limit, never a copy of it


def test_an_ended_engine_is_reaped_by_the_next_tick_never_left_a_zombie(tmp_path):
    """#73 item 8: the app left a zombie engine child until it quit. The queue keeps the engines it started and a
    later tick reaps those that ended."""
    import subprocess
    import time

    started = []

    def start(run_dir, choice):
        proc = subprocess.Popen(["true"])
        started.append(proc.pid)
        return proc

    queue = LocalQueue(tmp_path, cores=2)
    queue.submit(make_run(tmp_path, "r0", status="stopped"), GpuChoice(cpu=True))
    assert queue.tick(start=start) == ["r0"]
    pid = started[0]

    def state() -> str:
        try:
            return open(f"/proc/{pid}/stat").read().split(")")[1].split()[0]
        except FileNotFoundError:
            return "gone"

    deadline = time.time() + 30
    while state() not in ("Z", "gone") and time.time() < deadline:
        time.sleep(0.05)
    queue.tick(start=start)
    assert state() == "gone"
