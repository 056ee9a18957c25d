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
