"""A CPU run started while other processes keep the cores busy says so, with the fix (engine.runtime.cpuload);
the measure is /proc's tick counts, checked here on hand-computed numbers."""

import subprocess
import sys
import time

import pytest

from engine.runtime.cpuload import busy_warning, machine_ticks, others_busy, own_ticks
from tests.conftest import HANG_S, ROOT, engine_env, make_run_dir

STAT = "cpu  100 5 20 300 10 1 2 7 50 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1 2\n"
SELF = "1234 (python -m engine (x)) R 1 2 3 4 5 6 7 8 9 10 40 12 0 0 20 0"


def test_the_ticks_are_read_as_proc_says():
    # user 100 + nice 5 + system 20 + irq 1 + softirq 2 + steal 7 busy; idle 300 + iowait 10; guest not again
    assert machine_ticks(STAT) == (135.0, 445.0)
    assert own_ticks(SELF) == 52.0  # utime 40 + stime 12, after a command name holding ") " and spaces


def test_only_the_cores_this_process_may_run_on_are_counted(monkeypatch):
    """Under an affinity mask (taskset, a Slurm job's cpuset) the other cores' work shares nothing with the run."""
    import engine.runtime.cpuload as cpuload

    stat = ("cpu  30 0 10 60 0 0 0 0 0 0\n"
            "cpu0 25 0 5 10 0 0 0 0 0 0\n"  # kept busy by another job: 30 of 40 ticks
            "cpu1 5 0 5 50 0 0 0 0 0 0\n"  # this job's core: 10 of 60
            "intr 1 2\n")
    assert machine_ticks(stat) == (40.0, 100.0)
    assert machine_ticks(stat, frozenset({1})) == (10.0, 60.0)
    assert machine_ticks(stat, frozenset({0, 1})) == (40.0, 100.0)
    with pytest.raises(ValueError):
        machine_ticks(stat, frozenset({7}))  # no line of its own: _sample says nothing rather than guess
    # check() sizes the machine by the mask: one core of its own, on which another process keeps 0.8 busy
    monkeypatch.setattr(cpuload, "allowed_cpus", lambda: frozenset({1}))
    monkeypatch.setattr(cpuload, "_MARK", (0.0, 0.0, 0.0, 0.0))
    monkeypatch.setattr(cpuload, "_sample", lambda: (1.0, 80.0, 100.0, 0.0))
    assert cpuload.check(threads=2).startswith("the CPU is busy: other processes keep 0.8 of its 1 core busy, and "
                                               "this run's 2 threads")
    # one thread, and the one core 80% busy: it shares it (#73: said for one-thread runs too since round six)
    assert "no core is free for this run's 1 thread" in cpuload.check(threads=1)


def test_the_other_processes_share_is_the_machines_busy_time_less_this_process():
    # 2 cores, 200 ticks of the machine in the window: 150 busy, 50 of them this process's: 1.0 core for others
    assert others_busy((0.0, 1000, 5000, 10), (1.0, 1150, 5200, 60), cores=2) == 1.0
    assert others_busy((0.0, 1000, 5000, 10), (0.1, 1150, 5200, 60), cores=2) is None  # too short to tell
    assert others_busy(None, (1.0, 1150, 5200, 60), cores=2) is None


def test_the_warning_comes_only_when_threads_would_share_a_busy_core():
    said = busy_warning(threads=2, cores=2, others=1.0)
    assert said.startswith("the CPU is busy: other processes keep 1.0 of its 2 cores busy, and this run's 2 threads")
    assert "--set train.threads=1 trains on the free core " in said
    assert busy_warning(threads=1, cores=2, others=1.0) is None  # it has the free core
    # no core free: a one-thread run is told too (it shares a core), with no thread count to suggest
    shared = busy_warning(threads=1, cores=2, others=1.8)
    assert "no core is free for this run's 1 thread" in shared and "train.threads=" not in shared
    assert "no core is free" in busy_warning(threads=1, cores=2, others=11.6 / 6)
    assert busy_warning(threads=2, cores=2, others=0.2) is None  # the machine is (nearly) idle
    assert busy_warning(threads=8, cores=8, others=3.0) .count("train.threads=5 trains on the free cores") == 1


def test_a_run_started_beside_a_busy_loop_says_so_in_its_log(tmp_path, tiny_profile):
    """Two busy loops on a 2-core machine: the engine, at its default thread count, warns in engine.log."""
    import os

    import pytest

    cores = os.cpu_count() or 1
    if cores < 2:
        pytest.skip("one core: PyTorch starts one thread, which shares nothing")
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.5)
        run_dir = make_run_dir(tmp_path, tiny_profile(), overrides=("train.epochs=1", "train.threads=0",
                                                                    "data.train_per_class=10", "eval.test_at_end=false"))
        env = {k: v for k, v in engine_env().items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        with open(tmp_path / "engine.err", "w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "engine", "train", str(run_dir)], env=env, cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=err)
            end = time.time() + HANG_S
            while proc.poll() is None and time.time() < end and " INFO run run on cpu (" not in (tmp_path / "engine.err").read_text():
                time.sleep(0.1)
    finally:
        for loop in loops:  # the check is made as the run starts: the rest of it trains on free cores
            loop.kill()
    assert proc.wait(timeout=HANG_S) == 0, (tmp_path / "engine.err").read_text()[-2000:]
    assert "WARNING the CPU is busy: other processes keep" in (tmp_path / "engine.err").read_text()
