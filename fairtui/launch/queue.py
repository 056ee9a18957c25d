"""The local run queue: runs wait for their GPUs (at most `per_gpu` runs on each) and start in order.

The queue lives in ``<home>/queue.json`` under a file lock, so it survives the
app and is shared by every process that schedules (the app, headless sweeps).
The CPU is ``cores`` slots, not one device: a run takes as many as its resolved thread count
(``train.threads``; 0, PyTorch's default, is one a core: all of them), so on 8 cores eight
one-thread runs train side by side where one all-core run trains alone. A run that wants more
cores than are free waits; one that wants more than the machine has starts when the CPU is idle.

Queued runs must start even when whoever queued them has gone (the app quit, the SSH
connection dropped). So a queue made with ``worker=True`` makes sure, after each
submit, that exactly one detached worker (``fairtui queue-worker``) runs for the home:
- the worker holds ``<home>/queue.worker.lock`` for its whole life, so a second one
  exits at once, and a submitter that can take the lock knows none is running;
- the worker ticks the queue every few seconds and exits when the queue is empty; it
  releases its lock *while it still holds the queue's lock*, so a submit that races
  with its exit finds the lock free and starts a new worker;
- a run is never started twice. A start is a recorded transition: the entry becomes ``starting``
  (written to queue.json before anything starts), the engine starts holding ``<run>/engine.lock``
  (launcher.hold_engine_lock), its pid joins the entry, the ``queued`` marker goes, and the entry
  leaves. A worker killed anywhere in between leaves a ``starting`` entry; the next tick (under the
  queue lock, so no live worker is mid-start) starts it again only if no engine was started for it:
  none holds the lock now and none wrote engine.json since the start began.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Callable, Iterator

from engine.contract.locks import locked, release, try_lock
from fairtui.runs.home import EngineRunning, ReadOnlyHome
from fairtui.launch.launcher import GpuChoice, start_engine
from fairtui.runs.runfolder import engine_starting
from fairtui.runs.runfolder import RunView

CPU = "cpu"


def pool_of(gpus: str | None) -> list[str]:
    """The devices local runs given ``--gpus`` may take (sweeps, judgements): the CPU without --gpus or with
    ``cpu``, else the GPUs named."""
    if not gpus or gpus.strip().lower() == CPU:
        return [CPU]
    return [g.strip() for g in gpus.split(",")]


def devices_of(label: str | None) -> list[str]:
    """A run's devices from its GPU label: 'cpu', '0,1', or None (the engine's choice: GPU 0 or the CPU)."""
    if not label:
        return [CPU]
    return [CPU] if label == CPU else label.split(",")


WORKER_LOCK = "queue.worker.lock"


def cpu_threads(run_dir: Path, cores: int) -> int:
    """The CPU slots a run takes: its resolved ``train.threads`` (with ``deterministic`` and 0: 1, as the engine
    settles it), 0 meaning one a core; a run whose profile cannot be read takes the whole CPU."""
    from engine.contract.profile_io import read_toml

    try:
        train = read_toml(run_dir / "profile.toml").get("train") or {}
        threads = int(train.get("threads") or (1 if train.get("deterministic") else 0))
    except Exception:  # no profile yet, or not one: the safe assumption is every core
        return cores
    return min(threads, cores) if threads > 0 else cores


def _fault_point(step: str) -> None:
    """Called after each step of a start ("starting", "spawned", "pid", "running"); tests replace it to
    kill the worker there."""


LIMIT = "queue.limit.json"  # the home's one limit of runs a GPU, whichever worker or command reads it


def home_limit(home: Path) -> int:
    """The runs at once on each GPU of this home (``fairtui --per-gpu N``, `sweep --per-gpu N` store it); 1."""
    try:
        value = json.loads((home / LIMIT).read_text()).get("per_gpu")
    except (OSError, ValueError, AttributeError):
        return 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def set_home_limit(home: Path, per_gpu: int) -> None:
    """Store the home's limit (a command given --per-gpu): every worker of the home uses it from its next tick."""
    from engine.contract.atomic import atomic_write_json

    home.mkdir(parents=True, exist_ok=True)
    atomic_write_json(home / LIMIT, {"per_gpu": int(per_gpu)})


class LocalQueue:
    def __init__(self, home: Path, per_gpu: int | None = None, worker: bool = False, cores: int | None = None):
        """``per_gpu``: runs at once on each GPU for this queue alone (a study's --parallel, tests); None, the
        home's stored limit (:func:`home_limit`), read at every use, so every worker and command of a home agree.
        ``worker``: make sure a detached worker runs after every submit (what commands that queue for a user do;
        tests that drive the queue by hand leave it off). ``cores``: the CPU's slots (default this machine's)."""
        self.home, self._per_gpu, self.worker = home, per_gpu, worker
        self.cores = cores or os.cpu_count() or 1
        self.path, self.lock_path = home / "queue.json", home / "queue.lock"
        self._children: list = []  # the engines this queue started, until a tick sees them end

    @property
    def per_gpu(self) -> int:
        return self._per_gpu if self._per_gpu is not None else home_limit(self.home)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[dict]]:
        with contextlib.ExitStack() as stack:
            try:
                self.home.mkdir(parents=True, exist_ok=True)
                stack.enter_context(locked(self.lock_path))
            except OSError as err:
                raise ReadOnlyHome(self.home, err) from None
            try:
                entries = json.loads(self.path.read_text()) if self.path.exists() else []
            except ValueError:
                entries = []
            yield entries
            self._save(entries)

    def _save(self, entries: list[dict]) -> None:
        """Write queue.json (under the queue lock): at the end of each change, and inside a tick before
        each step of a start, so that a worker killed mid-start leaves a record of how far it got."""
        tmp = self.path.with_name(".queue.json.tmp")
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, self.path)

    def submit(self, run_dir: Path, gpus: GpuChoice | None, pool: list[str] | None = None) -> None:
        """Queue a run on fixed devices (``gpus``) or on any one device of ``pool`` (a sweep's GPUs)."""
        (run_dir / "queued").touch()
        with self._locked() as entries:
            entries.append({"run_id": run_dir.name, "gpus": gpus.label() if gpus else None, "pool": pool,
                            "enqueued": time.time()})
        if self.worker:
            ensure_worker(self.home)

    def entries(self) -> list[dict]:
        with self._locked() as entries:
            return list(entries)

    def holds(self, run_id: str) -> bool:
        """Whether the queue has an entry for the run (a run marked ``queued`` that it does not hold was left by a
        driver that is gone: see :func:`fairtui.launch.control.check_resumable`)."""
        return any(e["run_id"] == run_id for e in self.entries())

    def cancel(self, run_id: str) -> bool:
        """Take the run off the queue. A start under way that had started its engine (a tick cut short: Ctrl-C in
        a sweep or a study's driver) is finished, not undone: the run leaves the queue's hands and loses its
        ``queued`` mark, which would otherwise stay on a run its engine trains, with nobody to clear it."""
        with self._locked() as entries:
            for entry in entries:
                run_dir = self.home / "runs" / entry["run_id"]
                if entry["run_id"] == run_id and entry.get("state") == "starting" and _was_started(run_dir, entry):
                    (run_dir / "queued").unlink(missing_ok=True)
            before = len(entries)
            entries[:] = [e for e in entries if e["run_id"] != run_id]
            return len(entries) < before

    def _devices_for(self, entry: dict, counts: dict[str, int], reserved: set[str], need: int) -> list[str] | None:
        """The devices this entry can start on now, or None (and its devices are reserved: FIFO). ``counts``:
        runs per GPU, and the CPU's slots in use under ``cpu``; ``need``: the CPU slots this run takes."""
        def free(d: str) -> bool:
            if d in reserved:
                return False
            if d == CPU:
                return counts.get(CPU, 0) == 0 or counts.get(CPU, 0) + need <= self.cores
            return counts.get(d, 0) < self.per_gpu

        if entry.get("pool"):
            for d in entry["pool"]:
                if free(d):
                    return [d]
            reserved.update(entry["pool"])
            return None
        devs = devices_of(entry["gpus"])
        if all(free(d) for d in devs):
            return devs
        reserved.update(devs)
        return None

    def _take(self, counts: dict[str, int], devs: list[str], need: int) -> None:
        for d in devs:
            counts[d] = counts.get(d, 0) + (need if d == CPU else 1)

    def wait_reasons(self) -> dict[str, str]:
        """Why each queued run has not started: "waits for 0: 2 running, 1 ahead (2 a GPU: fairtui --per-gpu
        N)", or on the CPU "waits for cpu: 2 of 2 cores busy, needs 1, 1 ahead (train.threads)", short enough
        for 80 columns with its fix. Empty when nothing is queued (no folder is read)."""
        entries = self.entries()
        if not entries:
            return {}
        (counts, used), out = self.usage(), {}
        for i, entry in enumerate(entries):
            devs = entry.get("pool") or devices_of(entry["gpus"])
            ahead = sum(1 for e in entries[:i] if set(e.get("pool") or devices_of(e["gpus"])) & set(devs))
            any_of = "any of " if entry.get("pool") and len(devs) > 1 else ""
            if devs == [CPU]:
                need = cpu_threads(self.home / "runs" / entry["run_id"], self.cores)
                out[entry["run_id"]] = (f"waits for cpu: {used} of {self.cores} cores busy, needs {need}, {ahead} "
                                        "ahead (train.threads)")
                continue
            running = sum(counts.get(d, 0) for d in devs)
            out[entry["run_id"]] = (f"waits for {any_of}{','.join(devs)}: {running} running, {ahead} ahead "
                                    f"({self.per_gpu} a GPU: fairtui --per-gpu N)")
        return out

    def busy(self) -> dict[str, int]:
        """Runs per device among the running runs of this home, an engine still starting included: it holds
        the run's engine.lock from before it exists, and writes engine.json only once torch has loaded (seconds
        on a busy CPU). A tick that missed those started a sweep's children all at once, each one tick apart."""
        return self.usage()[0]

    def usage(self) -> tuple[dict[str, int], int]:
        """Runs per device (:meth:`busy`), and the CPU slots the running CPU runs take (:func:`cpu_threads`)."""
        from engine.contract.protocol import ENGINE_LOCK

        counts: dict[str, int] = {}
        slots = 0
        runs = self.home / "runs"
        for run_dir in (runs.iterdir() if runs.is_dir() else []):
            if (run_dir / "queued").exists():
                continue
            if (run_dir / "engine.json").exists():
                view = RunView.load(run_dir)
                # its slot is free when its engine process has exited, not when the engine has recorded its end:
                # the 2-5 s between the two (the last writes, the interpreter's exit) still take a core
                running = engine_starting(run_dir) or (view.finished is None and view.status() == "running")
            else:
                view, running = None, (run_dir / ENGINE_LOCK).exists() and engine_starting(run_dir)
            if running:
                view = view or RunView.load(run_dir)
                for d in devices_of(view.meta.get("gpus")):
                    counts[d] = counts.get(d, 0) + 1
                    slots += cpu_threads(run_dir, self.cores) if d == CPU else 0
        return counts, slots

    def tick(self, start: Callable = start_engine) -> list[str]:
        """Start every queued run whose devices have room, in order; return the started run ids.
        On a read-only home nothing can be queued or started: a tick does nothing."""
        try:
            return self._tick(start)
        except ReadOnlyHome:
            return []

    def _tick(self, start: Callable) -> list[str]:
        # the engines this queue started and that have ended: poll() reaps them (the app, a sweep or a judgement
        # lives on after its engines; an unreaped one stayed a zombie until the app quit, #73)
        self._children = [p for p in self._children if p.poll() is None]
        started = []
        with self._locked() as entries:
            counts, slots = self.usage()
            counts[CPU] = slots  # the CPU's slots in use, not its runs
            reserved: set[str] = set()
            keep = []
            for entry in entries:
                run_dir = self.home / "runs" / entry["run_id"]
                if not run_dir.exists():
                    continue  # deleted while it waited
                if entry.get("state") == "starting" and _was_started(run_dir, entry):
                    # a worker died after starting its engine: finish the start, never start a second one
                    (run_dir / "queued").unlink(missing_ok=True)
                    self._take(counts, (entry.get("devices") or CPU).split(","), cpu_threads(run_dir, self.cores))
                    started.append(entry["run_id"])
                    continue
                need = cpu_threads(run_dir, self.cores)
                try:
                    devs = self._devices_for(entry, counts, reserved, need)
                except Exception as err:  # noqa: BLE001 - an entry naming devices that cannot be had fails alone
                    fail_entry(run_dir, f"the queue could not place it: {type(err).__name__}: {err}")
                    continue
                if devs is None:
                    keep.append(entry)
                    continue
                label = ",".join(devs)
                if entry.get("pool"):
                    _set_gpus(run_dir, label)
                entry.update(state="starting", starting=time.time(), devices=label)
                entry.pop("pid", None)
                self._save(entries)
                _fault_point("starting")
                try:
                    proc = start(run_dir, GpuChoice.parse(label))
                except EngineRunning:  # an engine trains it already (a resume raced with the queue)
                    proc = None
                except Exception as err:  # noqa: BLE001 - one entry that cannot start fails alone: the queue goes on
                    fail_entry(run_dir, f"the queue could not start it: {type(err).__name__}: {err}")
                    continue
                _fault_point("spawned")
                if proc is not None:
                    entry["pid"] = proc.pid
                    self._save(entries)
                    if hasattr(proc, "poll"):
                        self._children.append(proc)  # reaped by a later tick: no zombie while the app lives
                _fault_point("pid")
                # Only now: a reader between the two steps must see "queued" or "running", never "lost".
                (run_dir / "queued").unlink(missing_ok=True)
                _fault_point("running")
                self._take(counts, devs, need)
                started.append(entry["run_id"])
            entries[:] = keep
        if started:
            from fairtui.runs.store import RunIndex

            index = RunIndex(self.home)
            for run_id in started:
                index.register(self.home / "runs" / run_id)
        return started


def fail_entry(run_dir: Path, reason: str) -> None:
    """A queued run that cannot start ends ``failed`` with ``reason`` (recorded beside its stream, as a start Slurm
    refused), and leaves the queue: the other entries of the home keep their places."""
    from engine.contract.protocol import record_end

    record_end(run_dir, "failed", reason)
    (run_dir / "queued").unlink(missing_ok=True)


def _was_started(run_dir: Path, entry: dict) -> bool:
    """Whether the start an entry records (``starting``: when it began) started an engine: one holds the
    run's engine.lock now, or one wrote engine.json after the start began (and has ended since)."""
    if engine_starting(run_dir):
        return True
    try:
        info = json.loads((run_dir / "engine.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info.get("started"), (int, float)) and info["started"] >= entry.get("starting", 0)


def _set_gpus(run_dir: Path, label: str) -> None:
    from fairtui.launch.launcher import change_meta

    change_meta(run_dir, lambda meta: meta.update(gpus=label))


def _try_worker_lock(home: Path):
    """The worker lock, held (an open file), or None when a worker holds it."""
    return try_lock(home / WORKER_LOCK)


def ensure_worker(home: Path) -> bool:
    """Start the detached queue worker unless one is running; True if one was started. Two callers at
    once may both start one: the second finds the lock taken and exits without doing anything."""
    import subprocess
    import sys

    lock = _try_worker_lock(home)
    if lock is None:
        return False
    lock.close()  # closing releases it: the worker takes it
    with open(home / "queue.worker.log", "ab") as log:
        subprocess.Popen([sys.executable, "-m", "fairtui", "queue-worker", "--home", str(home)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    return True


def run_worker(home: Path, per_gpu: int | None = None, interval: float = 2.0, start: Callable = start_engine) -> int:
    """The worker's loop: tick until the queue is empty; 0 also when another worker already runs. ``per_gpu``
    None: the home's limit, read at every tick."""
    lock = _try_worker_lock(home)
    if lock is None:
        return 0
    queue = LocalQueue(home, per_gpu=per_gpu)
    with lock:
        while True:
            queue.tick(start)
            with queue._locked() as entries:
                if not entries:
                    release(lock)  # under the queue lock: see the module docstring
                    return 0
            time.sleep(interval)
