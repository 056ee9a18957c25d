"""Acting on runs: stopping an engine, changing a run's metadata. Shared by the commands and the app."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable

from fairtui.runs.runfolder import RunView, engine_alive, engine_process, process_alive


class ControlError(RuntimeError):
    """An action on a run that cannot be done now; the message says why and what to do."""


class StopError(ControlError):
    pass


class NothingToDo(ControlError):
    """The action is done already (a completed run resumed): not an error for the CLI (exit 0)."""


def check_resumable(run_dir: Path) -> None:
    """ControlError unless the run can resume (stopped, failed or lost, with a whole profile): the one rule
    for `fairtui resume` and the app's `r`."""
    from engine.contract.profile_io import load_run_profile
    from engine.contract.profile_schema import ProfileError

    try:
        load_run_profile(run_dir)  # a folder whose profile is missing or cut short never resumes on defaults
    except ProfileError as err:
        raise ControlError(str(err)) from None
    status = RunView.load(run_dir).status()
    if status == "running":
        raise ControlError(f"run {run_dir.name} is still running (see engine.json); stop it first")
    if status == "completed":
        raise NothingToDo(f"run {run_dir.name} has completed; nothing to resume")
    if status == "imported":
        raise ControlError(f"run {run_dir.name} is an imported model: it does not train (fairtui eval evaluates it)")
    if status == "queued" and not stranded(run_dir):
        raise ControlError(f"run {run_dir.name} is queued already: it starts when its devices free")


def stranded(run_dir: Path) -> bool:
    """A run marked ``queued`` that no queue holds: the process that queued it (a tune driver, a sweep) ended
    before the queue started it. It resumes by hand (`fairtui resume`) or with its study (`tune --resume`)."""
    from fairtui.launch.queue import LocalQueue

    if not (run_dir / "queued").exists() or RunView.load(run_dir).meta.get("launcher") == "slurm":
        return False
    return not LocalQueue(run_dir.parent.parent).holds(run_dir.name)


def queue_resume(run_dir: Path, queue) -> str:
    """Resume a run through the queue (the app's `r`): on the GPUs it ran on, when they free."""
    from fairtui.launch.launcher import GpuChoice

    check_resumable(run_dir)
    queue.submit(run_dir, GpuChoice.parse(RunView.load(run_dir).meta.get("gpus")))
    return f"run {run_dir.name} queued to resume"


def queue_rerun(run_dir: Path, queue) -> Path:
    """A new run of the same resolved profile, name, tags and GPUs (the app's `R`), queued; its folder.
    ProfileError if the profile cannot start a run any more."""
    from engine.contract.profile_io import load_profile
    from fairtui.launch.launcher import GpuChoice, create_run
    from fairtui.runs.store import RunIndex

    view = RunView.load(run_dir)
    home = run_dir.parent.parent
    gpus = GpuChoice.parse(view.meta.get("gpus"))
    new_dir = create_run(home, load_profile(run_dir / "profile.toml"), view.meta.get("profile_path") or "",
                         view.name, view.meta.get("tags", []), gpus)
    queue.submit(new_dir, gpus)
    RunIndex(home).register(new_dir)
    return new_dir


def check_deletable(run_dir: Path) -> None:
    """ControlError if the run trains (its engine alive, or holding engine.lock while it starts)."""
    if RunView.load(run_dir).status() == "running":  # its engine alive, or holding engine.lock as it starts
        raise ControlError(f"run {run_dir.name} is running; `fairtui stop {run_dir.name}` first")


def dependents(run_dir: Path) -> list[str]:
    """What would lose its start if the run went: a queued or running run that fine-tunes from it
    (``method.init_from`` names its folder or a checkpoint inside it), and a study whose driver is alive with a trial
    that does (its next trials start from the same run). One line each."""
    from engine.contract.locks import is_locked
    from fairtui.runs.store import RunIndex

    home, run_id = run_dir.parent.parent, run_dir.name
    out, studies = [], set()
    for doc in RunIndex(home).read():
        if doc["run_id"] == run_id:
            continue
        other = home / "runs" / doc["run_id"]
        ref = str((RunView.load(other).config.get("method") or {}).get("init_from") or "")
        if not ref or run_id not in Path(ref).parts:
            continue
        if doc.get("status") in ("queued", "running"):
            out.append(f"run {doc.get('name')} [{doc['run_id']}] ({doc['status']}) fine-tunes from it")
        studies.update(t.split(":", 1)[1] for t in doc.get("tags") or [] if str(t).startswith("study:"))
    for study in sorted(studies):
        if is_locked(home / "studies" / f"{study}.driver"):  # its driver holds it: the study is adding trials
            out.append(f"study {study} (its driver is running) fine-tunes from it in every trial")
    return out


def delete_run(run_dir: Path) -> str:
    """Delete a run, the same from the CLI (`rm`) and the app (`d`): its queue entry is cancelled, a run
    that trains is refused, a run linked in from elsewhere loses the link and keeps its target, and it
    leaves the index. Returns what was done, in words."""
    import shutil

    from fairtui.launch.queue import LocalQueue
    from fairtui.runs.store import RunIndex

    home, run_id = run_dir.parent.parent, run_dir.name
    LocalQueue(home).cancel(run_id)  # first: the queue cannot start it while it is being deleted
    check_deletable(run_dir)
    if run_dir.is_symlink():
        run_dir.unlink()
        RunIndex(home).remove(run_id)
        return f"removed the link {run_id} (its target was left as it is)"
    try:
        shutil.rmtree(run_dir)
    except OSError as err:
        raise ControlError(f"run {run_id}: not deleted: {err.strerror or err}") from None
    RunIndex(home).remove(run_id)
    return f"deleted {run_id}"


def stop_requested(run_dir: Path) -> bool:
    """True when a stop was asked and the engine still runs: the next stop is a kill (`stop --now`)."""
    from engine.contract.protocol import STOP_MARKER

    return (run_dir / STOP_MARKER).exists() and engine_alive(run_dir)


def engine_processes(run_dir: Path) -> tuple[int | None, list[int]]:
    """The engine's process group, when it leads its own (the launcher starts it so), and the pids of the
    engine and its ranks on this host (engine.json), for a kill that a hung engine cannot ignore."""
    import socket

    info = engine_process(run_dir) or {}
    pids = [info["pid"]] if isinstance(info.get("pid"), int) else []
    pids += [r["pid"] for r in info.get("ranks", []) if isinstance(r, dict) and isinstance(r.get("pid"), int)
             and r.get("host", info.get("host")) == socket.gethostname() and r["pid"] not in pids]
    group = None
    if pids:
        try:
            group = os.getpgid(pids[0])
        except ProcessLookupError:
            pass
    if group is not None and (group != pids[0] or group == os.getpgrp()):
        group = None  # the engine leads no group of its own (started by torchrun, srun...): kill the pids alone
    return group, pids


def kill_run(run_dir: Path, timeout: float = 30.0) -> str:
    """SIGKILL the engine's process group (and its ranks): for an engine that hangs and ignores the stop it
    was asked for. The run keeps its last checkpoint, is recorded as stopped (killed) and resumes from it."""
    from engine.contract.protocol import STOP_MARKER, record_end

    if not engine_alive(run_dir):
        raise StopError(f"run {run_dir.name} is not running (status {RunView.load(run_dir).status()})")
    if not process_alive(engine_process(run_dir)):
        raise StopError(f"run {run_dir.name}: its engine is starting and has not said its pid yet; try again in a "
                        "moment, or `fairtui stop` it (it stops at its first batch)")
    group, pids = engine_processes(run_dir)
    try:
        if group is not None:
            os.killpg(group, signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    except PermissionError as err:
        raise StopError(f"run {run_dir.name}: its engine could not be killed: {err.strerror or err}") from None
    end = time.time() + timeout
    while time.time() < end and engine_alive(run_dir):
        time.sleep(0.1)
    if engine_alive(run_dir):
        raise StopError(f"run {run_dir.name}: its engine (pid {pids[0]}) survived SIGKILL for {timeout:.0f} s")
    if RunView.load(run_dir).status() == "lost":  # nothing closed the session: say how it ended, beside the stream
        record_end(run_dir, "stopped", "killed (SIGKILL) by fairtui stop --now: the engine did not stop when asked; "
                                       "it resumes from its last checkpoint", killed=True)
    (run_dir / STOP_MARKER).unlink(missing_ok=True)  # the resumed run must not stop at its first batch
    from fairtui.runs.store import RunIndex

    RunIndex(run_dir.parent.parent).register(run_dir)
    return RunView.load(run_dir).status() + " (killed)"


def stop_run(run_dir: Path, wait: bool = True, timeout: float = 600.0) -> str:
    """SIGTERM the run's engine (it stops after its batch, keeping its checkpoint); return the new status.
    A run whose stop was asked before and that still runs is not asked again: see :func:`kill_run`."""
    view = RunView.load(run_dir)
    if view.meta.get("launcher") == "slurm" and view.meta.get("slurm_cluster", "slurm") == "slurm" \
            and view.status() in ("running", "queued"):
        return _stop_slurm(run_dir, view.status(), wait, timeout)
    if view.status() == "queued" and not engine_alive(run_dir):
        left = unqueue(run_dir)
        if left is not None:
            return left
    if RunView.load(run_dir).status() != "running" or not engine_alive(run_dir):
        raise StopError(f"run {run_dir.name} is not running (status {RunView.load(run_dir).status()})")
    info = engine_process(run_dir)
    from engine.contract.protocol import STOP_MARKER

    (run_dir / STOP_MARKER).touch()  # the engine polls it with its signal flag: a stop it cannot miss
    if process_alive(info) and info.get("signals"):
        os.kill(info["pid"], signal.SIGTERM)
    # else the engine is still starting (no engine.json of its own yet, or its handler not installed): a
    # SIGTERM now would kill it with nothing recorded; it stops at its first batch instead
    if not wait:
        return "stopping"
    end = time.time() + timeout
    while time.time() < end and engine_alive(run_dir):
        time.sleep(0.2)
    status = RunView.load(run_dir).status()
    from fairtui.runs.store import RunIndex

    RunIndex(run_dir.parent.parent).register(run_dir)
    return status


def _stop_slurm(run_dir: Path, status: str, wait: bool, timeout: float) -> str:
    """A Slurm run's stop. A job still in Slurm's queue is cancelled, and the run recorded stopped. A running one is
    asked through the run folder (the engine polls ``stop.requested`` between batches, on whichever node it runs):
    it stops after its batch, keeps its checkpoint and records ``stopped``, and the job ends by itself. scancel's
    signal reached the engine too late, if at all: the job step was killed with the batch script and the run read
    lost (seen on a real Slurm, 22.05). A job whose engine does not stop within ``timeout`` is cancelled."""
    from engine.contract.protocol import STOP_MARKER, record_end
    from fairtui.launch.slurm import cancel
    from fairtui.runs.store import RunIndex

    if status == "queued":
        cancel(run_dir, graceful=False)
        (run_dir / "queued").unlink(missing_ok=True)
        if RunView.load(run_dir).finished is None:
            record_end(run_dir, "stopped", "cancelled in Slurm's queue before it started; `fairtui resume` submits "
                                           "it again")
        RunIndex(run_dir.parent.parent).register(run_dir)
        return "stopped (its job left Slurm's queue)"
    (run_dir / STOP_MARKER).touch()
    if not wait:
        return "stopping after its batch (the job then ends)"
    end = time.time() + timeout
    while time.time() < end and RunView.load(run_dir).status() == "running":
        time.sleep(0.5)
    if RunView.load(run_dir).status() == "running":
        cancel(run_dir)
        return "cancelled (scancel): the engine did not stop when asked"
    RunIndex(run_dir.parent.parent).register(run_dir)
    return RunView.load(run_dir).status()


UNQUEUED = "removed from the queue before it started; `fairtui resume` queues it again"


def unqueue(run_dir: Path) -> str | None:
    """Stop a queued run: take it off the local queue, and record it ``stopped`` (it never started, or it waited
    to resume). None when the queue's worker started its engine meanwhile: then it is stopped as a running run."""
    from engine.contract.protocol import record_end
    from fairtui.launch.queue import LocalQueue
    from fairtui.runs.runfolder import engine_starting
    from fairtui.runs.store import RunIndex

    LocalQueue(run_dir.parent.parent).cancel(run_dir.name)
    if engine_starting(run_dir) or engine_alive(run_dir):
        return None
    (run_dir / "queued").unlink(missing_ok=True)
    if RunView.load(run_dir).finished is None:  # never started: its end is recorded beside the stream
        record_end(run_dir, "stopped", UNQUEUED)
    RunIndex(run_dir.parent.parent).register(run_dir)
    return "removed from the queue; it stays stopped"


def update_meta(run_dir: Path, change: Callable[[dict], None]) -> dict:
    """Change ``meta.json`` (the source of truth for name, tags, notes) and the index entry."""
    from fairtui.launch.launcher import change_meta
    from fairtui.runs.store import RunIndex

    meta = change_meta(run_dir, change)
    RunIndex(run_dir.parent.parent).register(run_dir)
    return meta
