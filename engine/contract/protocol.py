"""The run folder's protocol between the engine and whoever starts, stops and watches it (torch-free): the
exit codes, the stop marker, ``engine.json`` (who runs the folder), the failure files through which a
command tells the command line, and a rank tells rank 0, why it failed, and where a run's checkpoints are
found (a fine-tune's ``init_from``)."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from engine.contract.procinfo import process_start_time
from engine.contract.profile_schema import ProfileError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 130

# The one lock for "an engine trains this run folder": taken by whoever starts a training engine (the launcher,
# before the engine exists, handing the open file down: LOCK_FD_ENV names its descriptor) or by the engine
# itself when started by hand (`python -m engine train RUN`); held until the engine exits.
# The `runtime` of run_started and run_resumed for a run in plain fp32, eager (engine.runtime.device.Runtime.options); the
# runtime of runs from engines before that field, read from their device text (fairtui.runs.configurations).
RUNTIME_FP32 = "fp32"
ENGINE_LOCK = "engine.lock"
LOCK_FD_ENV = "FAIRTUI_ENGINE_LOCK_FD"

STOP_MARKER = "stop.requested"  # `fairtui stop` leaves it: a stop asked before the engine could take a signal


def write_process_file(run_dir: Path, command: str, pid: int | None = None, signals: bool = True,
                       **extra: Any) -> None:
    """``engine.json``: who is running this folder (for `fairtui stop` and liveness checks). Written by the
    engine alone (itself, or the supervisor of a multi-process run); before it is, the run's ENGINE_LOCK
    says that an engine is starting. ``signals``: the process's handler is installed, so SIGTERM stops it
    cleanly (before that, `fairtui stop` leaves STOP_MARKER instead of a signal that would kill it)."""
    from engine.contract.atomic import atomic_write_json

    pid = os.getpid() if pid is None else pid
    atomic_write_json(run_dir / "engine.json", {"pid": pid, "host": socket.gethostname(), "started": time.time(),
                                                "command": command, "proc_start": process_start_time(pid),
                                                **({"signals": True} if signals else {}), **extra})


def add_ranks(run_dir: Path, ranks: list[dict[str, Any]]) -> None:
    """Name every rank's process in ``engine.json`` (rank 0, once the group has formed)."""
    import json

    from engine.contract.atomic import atomic_write_json

    try:
        info = json.loads((run_dir / "engine.json").read_text())
    except (OSError, ValueError):
        return
    atomic_write_json(run_dir / "engine.json", {**info, "world_size": len(ranks), "ranks": ranks})


ENDED = "ended.json"


def record_end(run_dir: Path, status: str, error: str, **extra: Any) -> None:
    """The end of a session that no engine could record in the event stream, recorded beside it instead:
    a start that Slurm refused (``failed``), an engine killed by SIGKILL (``stopped``, ``killed``). Written
    by whoever saw it, read by every reader of the run as the session's ``run_finished``
    (:func:`read_end`), removed by the next engine as it starts (:func:`clear_end`): the event stream has
    one writer, the engine."""
    from engine.contract.atomic import atomic_write_json

    atomic_write_json(run_dir / ENDED, {"type": "run_finished", "status": status, "error": error, "t": time.time(),
                                        **extra})


def read_end(run_dir: Path) -> dict[str, Any] | None:
    """The end :func:`record_end` recorded after the run's last engine started, or None."""
    import json

    try:
        doc = json.loads((run_dir / ENDED).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("status"), str) else None


def clear_end(run_dir: Path) -> None:
    """The engine, as it starts: an end recorded for an earlier session is history."""
    (run_dir / ENDED).unlink(missing_ok=True)


FAILURE_FILE = "command.failed.json"


def report_failure(run_dir: Path, command: str, reason: str, code: int) -> int:
    """A command (eval, import) that fails for a reason a user can act on: the one line on stderr (and
    so in engine.log) and in ``<run>/command.failed.json`` for the CLI, which reads it there rather than
    from log text. Returns ``code``, the exit code."""
    from engine.contract.atomic import atomic_write_json

    print(f"fairtui {command}: {reason}", file=sys.stderr)
    try:
        atomic_write_json(run_dir / FAILURE_FILE, {"command": command, "reason": reason, "code": code,
                                                   "pid": os.getpid(), "t": time.time()})
    except OSError:
        pass
    return code


def read_failure(run_dir: Path, command: str, since: float = 0.0) -> str | None:
    """The reason the latest ``command`` gave for failing, if it was written at ``since`` or later."""
    import json

    try:
        doc = json.loads((run_dir / FAILURE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if doc.get("command") != command or not isinstance(doc.get("t"), (int, float)) or doc["t"] < since:
        return None
    return f"fairtui {command}: {doc.get('reason')}"


def failure_file(run_dir: Path, rank: int) -> Path:
    """Where rank ``rank`` of a supervised run leaves the reason it failed."""
    return run_dir / f".rank{rank}.failed"


def write_failure(run_dir: Path, rank: int, reason: str, collective: bool) -> None:
    """A rank's one-line reason for the supervisor; ``collective``: it only saw another rank fail."""
    from engine.contract.atomic import atomic_write_json

    try:
        atomic_write_json(failure_file(run_dir, rank), {"rank": rank, "reason": reason, "collective": collective})
    except OSError:
        pass


PEER_GRACE_S = 10.0  # how long rank 0 waits for its peers' failure files after a collective failed


def clear_failures(run_dir: Path) -> None:
    """Remove the ``.rank<r>.failed`` files of an earlier attempt (rank 0, before the group forms)."""
    for path in run_dir.glob(".rank*.failed"):
        path.unlink(missing_ok=True)


def read_failures(run_dir: Path, ranks: Any, remove: bool = True) -> dict[int, dict[str, Any]]:
    """The reasons ranks ``ranks`` left (:func:`write_failure`), by rank; each file removed once read. The one
    reader of failure files: the supervisor after its launcher returned, rank 0 after a collective failed."""
    import json

    found: dict[int, dict[str, Any]] = {}
    for rank in ranks:
        path = failure_file(run_dir, rank)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            found[rank] = doc
            if remove:
                path.unlink(missing_ok=True)
    return found


def peer_failure(run_dir: Path, world: int, members: list[dict[str, Any]] | None, seen: str,
                 grace_s: float = PEER_GRACE_S) -> str:
    """Which rank made rank 0's collective fail, for a run whose launcher rank 0 cannot ask (torchrun on
    several nodes, Slurm): the ranks share the run folder, and every rank that fails leaves its reason
    there (:func:`write_failure`). Rank 0 waits up to ``grace_s`` for all of them, then names a rank's
    own error, else the ranks that left nothing (killed, or their node was lost: ``members`` gives
    their host and pid), else what rank 0 saw (``seen``)."""
    found: dict[int, dict] = {}
    deadline = time.monotonic() + grace_s
    while True:
        found.update(read_failures(run_dir, [r for r in range(1, world) if r not in found]))
        own = [r for r in sorted(found) if not found[r].get("collective")]
        if own or len(found) == world - 1 or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if own:
        return f"rank {own[0]}: {found[own[0]].get('reason')}"
    silent = [r for r in range(1, world) if r not in found]
    if not silent:
        return seen
    where = {m.get("rank"): m for m in members or [] if isinstance(m, dict)}
    named = ", ".join(f"rank {r}" + (f" (pid {where[r].get('pid')} on {where[r].get('host')})" if r in where else "")
                      for r in silent)
    verb = "was" if len(silent) == 1 else "were"
    return (f"{named} {verb} lost without recording an error (killed, or a node failed: that node's "
            f"launcher output says how); rank 0 saw: {seen}")


# the checkpoints a run folder named in ``init_from`` gives, in the order tried: its best, else its last
INIT_CHECKPOINTS = ("best", "last")


def resolve_init_checkpoint(ref: str) -> Path:
    """``init_from`` as a checkpoint file: a .pt file, or a run folder (its best checkpoint)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        for name in INIT_CHECKPOINTS:
            if (path / "checkpoints" / f"{name}.pt").exists():
                return path / "checkpoints" / f"{name}.pt"
    if path.is_file():
        return path
    raise ProfileError("profile", "method.init_from", f"no checkpoint at {ref!r}: give a run (id or name, "
                       "resolved by `fairtui run`), a run folder or a .pt file")


TEACHER_KEY = "method.teacher"


def resolve_teacher_checkpoint(ref: str) -> Path:
    """The teacher's checkpoint file: a run folder's best (else last) or a run's own checkpoint; ProfileError in
    one line otherwise."""
    path = Path(ref).expanduser()
    if path.is_dir():
        for name in INIT_CHECKPOINTS:
            if (path / "checkpoints" / f"{name}.pt").is_file():
                return path / "checkpoints" / f"{name}.pt"
        raise ProfileError("profile", TEACHER_KEY, f"the run {path} has no checkpoint: train it first")
    if not path.is_file():
        raise ProfileError("profile", TEACHER_KEY, f"no teacher at {ref!r}: give a run (id or name, resolved by "
                           "`fairtui run`), a run folder or a run's checkpoint")
    if path.parent.name != "checkpoints" or not (path.parent.parent / "profile.toml").is_file():
        raise ProfileError("profile", TEACHER_KEY, f"{path} is not a run's checkpoint: a teacher is a run, whose "
                           "profile.toml gives its architecture (train it with fairtui, or import it)")
    return path


def run_checkpoint(path: Path | str) -> tuple[str, str] | None:
    """(run id, "best" or "last") when ``path`` is a run's own checkpoint (``<run>/checkpoints/best.pt``), else None:
    what a fine-tune's start records (engine.methods.standard) and what a comparison reads back (fairtui.judge.groups)."""
    path = Path(path)
    if path.parent.name == "checkpoints" and path.suffix == ".pt" and path.stem in INIT_CHECKPOINTS:
        return path.parent.parent.name, path.stem
    return None


def engine_args(command: str, target: Path | str, *options: str) -> list[str]:
    """The engine's command line after the interpreter (``python -m engine COMMAND TARGET [OPTIONS]``): its
    one spelling, for the launcher, the queue, Slurm's tasks, torch's launcher and the checks."""
    return ["-m", "engine", command, str(target), *options]


def engine_command(command: str, target: Path | str, *options: str) -> list[str]:
    """:func:`engine_args` run by this interpreter."""
    return [sys.executable, *engine_args(command, target, *options)]


def resumed_text(event: dict[str, Any]) -> str:
    """Where a `run_resumed` event continues: after an epoch, or inside the next one (a stop's partial.pt).
    The engine logs it and the app shows it: one wording."""
    epoch = event.get("epoch")
    if event.get("phase") == "train" and event.get("batch") is not None:
        return f"resumed in epoch {(epoch or 0) + 1}, after batch {event['batch']} of {event.get('batches')}"
    if event.get("phase") == "val":
        return f"resumed in epoch {(epoch or 0) + 1}, at its validation (its training was kept)"
    return f"resumed after epoch {epoch}"
