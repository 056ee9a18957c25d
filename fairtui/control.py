"""Acting on runs: stopping an engine, changing a run's metadata. Shared by the commands and the app."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable

from fairtui.runfolder import RunView, engine_alive, engine_process


class ControlError(RuntimeError):
    """An action on a run that cannot be done now; the message says why and what to do."""


class StopError(ControlError):
    pass


class NothingToDo(ControlError):
    """The action is done already (a completed run resumed): not an error for the CLI (exit 0)."""


def check_resumable(run_dir: Path) -> None:
    """ControlError unless the run can resume (stopped, failed or lost, with a whole profile): the one rule
    for `fairtui resume` and the app's `r`."""
    from engine.config import load_run_profile
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
    if status == "queued":
        raise ControlError(f"run {run_dir.name} is queued already: it starts when its devices free")


def queue_resume(run_dir: Path, queue) -> str:
    """Resume a run through the queue (the app's `r`): on the GPUs it ran on, when they free."""
    from fairtui.launcher import GpuChoice

    check_resumable(run_dir)
    queue.submit(run_dir, GpuChoice.parse(RunView.load(run_dir).meta.get("gpus")))
    return f"run {run_dir.name} queued to resume"


def queue_rerun(run_dir: Path, queue) -> Path:
    """A new run of the same resolved profile, name, tags and GPUs (the app's `R`), queued; its folder.
    ProfileError if the profile cannot start a run any more."""
    from engine.config import load_profile
    from fairtui.launcher import GpuChoice, create_run
    from fairtui.store import RunIndex

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
    from fairtui.launcher import engine_lock_held

    if RunView.load(run_dir).status() == "running" or engine_lock_held(run_dir):
        raise ControlError(f"run {run_dir.name} is running; `fairtui stop {run_dir.name}` first")


def delete_run(run_dir: Path) -> str:
    """Delete a run, the same from the CLI (`rm`) and the app (`d`): its queue entry is cancelled, a run
    that trains is refused, a run linked in from elsewhere loses the link and keeps its target, and it
    leaves the index. Returns what was done, in words."""
    import shutil

    from fairtui.queue import LocalQueue
    from fairtui.store import RunIndex

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


def stop_run(run_dir: Path, wait: bool = True, timeout: float = 600.0) -> str:
    """SIGTERM the run's engine (it stops after its batch, keeping its checkpoint); return the new status."""
    view = RunView.load(run_dir)
    if view.meta.get("launcher") == "slurm" and view.meta.get("slurm_cluster", "slurm") == "slurm" \
            and view.status() in ("running", "queued"):
        from fairtui.slurm import cancel

        cancel(run_dir)
        return "cancelled (scancel)"
    if view.status() != "running" or not engine_alive(run_dir):
        raise StopError(f"run {run_dir.name} is not running (status {view.status()})")
    info = engine_process(run_dir)
    from engine.process import STOP_MARKER

    (run_dir / STOP_MARKER).touch()  # the engine polls it with its signal flag: a stop it cannot miss
    if info.get("signals"):
        os.kill(info["pid"], signal.SIGTERM)
    # else the engine is still starting (its handler not yet installed): a SIGTERM now would kill it
    # with nothing recorded; it stops at its first batch instead
    if not wait:
        return "stopping"
    end = time.time() + timeout
    while time.time() < end and engine_alive(run_dir):
        time.sleep(0.2)
    status = RunView.load(run_dir).status()
    from fairtui.store import RunIndex

    RunIndex(run_dir.parent.parent).register(run_dir)
    return status


def update_meta(run_dir: Path, change: Callable[[dict], None]) -> dict:
    """Change ``meta.json`` (the source of truth for name, tags, notes) and the index entry."""
    from fairtui.launcher import change_meta
    from fairtui.store import RunIndex

    meta = change_meta(run_dir, change)
    RunIndex(run_dir.parent.parent).register(run_dir)
    return meta
