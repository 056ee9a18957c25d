"""Whether other processes keep this machine's cores busy as a CPU run starts (Linux ``/proc``).

PyTorch starts as many intra-op threads as there are cores. When another process already keeps one
of them busy, every parallel region waits for the thread that shares its core: on the 2-core
machine the quickstart's epochs took 30 s beside a one-thread CIFAR-10 run instead of 2 s alone.
The engine says so in its log (and `fairtui run` shows it), with the fix. It does not change the
thread count by itself: a CPU run's numbers depend on it, and the same profile and seed must give
the same numbers on the same machine whatever else runs.

The measure needs no pause: the machine's busy time between the engine's start (:func:`mark`, as the
process begins) and the runtime's settling (after torch has loaded, a second or more later), less the
engine's own CPU time in that window. Only the cores this process may run on count (its affinity mask:
``taskset``, a Slurm job's cpuset): other jobs busy on cores outside it share nothing with this run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_MARK: tuple[float, float, float, float] | None = None  # wall time, machine busy, machine total, own (s)


def machine_ticks(text: str, cpus: frozenset[int] | None = None) -> tuple[float, float]:
    """Busy and total clock ticks from /proc/stat: of all cores (its ``cpu`` line), or of the cores ``cpus``
    (their ``cpuN`` lines; one missing, as an offline core is, counts nothing). Idle and iowait are idle;
    guest time is inside user time and not counted twice."""
    def counted(name: str) -> bool:
        if cpus is None:
            return name == "cpu"
        return name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus

    busy = total = 0.0
    found = False
    for line in text.splitlines():
        if not line.strip() or not counted(line.split(maxsplit=1)[0]):
            continue
        values = [float(v) for v in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
        busy, total, found = busy + sum(values) - values[3] - values[4], total + sum(values), True
    if not found:
        raise ValueError("no cpu line for these cores in /proc/stat")
    return busy, total


def allowed_cpus() -> frozenset[int] | None:
    """The cores this process may run on, or None where the platform does not say (then: all of them)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def own_ticks(text: str) -> float:
    """This process's user + system clock ticks, all its threads, from /proc/self/stat."""
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return float(fields[11]) + float(fields[12])  # utime, stime (fields 14 and 15 of stat(5))


def _sample() -> tuple[float, float, float, float] | None:
    try:
        busy, total = machine_ticks(Path("/proc/stat").read_text(), allowed_cpus())
        own = own_ticks(Path("/proc/self/stat").read_text())
    except (OSError, ValueError, StopIteration, IndexError):
        return None  # not Linux, or /proc not readable: nothing is said
    return time.time(), busy, total, own


def mark() -> None:
    """Remember the machine's and this process's CPU time now (the engine calls it as it starts)."""
    global _MARK
    _MARK = _sample()


def others_busy(start: tuple[float, float, float, float] | None, end: tuple[float, float, float, float] | None,
                cores: int) -> float | None:
    """How many cores other processes kept busy between two samples (None: too short a window to say)."""
    if start is None or end is None or end[2] - start[2] <= 0 or end[0] - start[0] < 0.3:
        return None
    busy = (end[1] - start[1]) - (end[3] - start[3])  # the machine's busy ticks less this process's own
    return max(0.0, min(float(cores), cores * busy / (end[2] - start[2])))


def busy_warning(threads: int, cores: int, others: float | None) -> str | None:
    """The warning for a CPU run of ``threads`` threads on ``cores`` cores, ``others`` of them kept busy
    by other processes; None when its threads have cores of their own."""
    if others is None or others < 0.5 or threads <= round(cores - others):
        return None
    free = max(1, round(cores - others))
    plural = "s" if cores > 1 else ""
    if threads == 1:  # no core is free: even one thread shares one (#73: a one-thread run at load 11.6 said nothing)
        return (f"the CPU is busy: other processes keep {others:.1f} of its {cores} core{plural} busy, and no core is "
                f"free for this run's {threads} thread{'s' if threads > 1 else ''}: it shares them (epochs can be "
                "several times slower than on a quiet machine)")
    return (f"the CPU is busy: other processes keep {others:.1f} of its {cores} core{plural} busy, and this run's "
            f"{threads} threads will wait on them (epochs can be many times slower). "
            f"--set train.threads={free} trains on the free core{'s' if free > 1 else ''} "
            f"(the thread count is part of a CPU run's numbers: it is recorded)")


def check(threads: int) -> str | None:
    """The warning for this process, measured since :func:`mark`; None when the cores are free."""
    cpus = allowed_cpus()  # the cores _sample counts: this process's, or every core of the machine
    cores = len(cpus) if cpus else os.cpu_count() or 1
    return busy_warning(threads, cores, others_busy(_MARK, _sample(), cores))


def warn_if_busy() -> None:
    """Say in the log (engine.log, which `fairtui run` shows) when other processes keep the cores busy."""
    import logging

    import torch

    warning = check(torch.get_num_threads())
    if warning:
        logging.getLogger("engine").warning("%s", warning)
