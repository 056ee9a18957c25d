"""The engine process's contract, shared by every engine command (train, eval, import) and by nothing
above them: DESIGN.md's exit codes, the stop flag and its marker file, logging, the run lock,
``engine.json``, a rank's failure file, and the one rule that turns a command's outcome into a
`run_finished` event and an exit code.

A leaf of the engine: torch-free at import, and what it imports (lazily, to classify an error) never
imports it back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, NoReturn

from engine.procinfo import process_start_time
from engine.contract.profile_schema import ProfileError

log = logging.getLogger("engine")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 130


STOP_MARKER = "stop.requested"  # `fairtui stop` leaves it: a stop asked before the engine could take a signal


class StopRequested(Exception):
    """SIGINT / SIGTERM arrived: stop at the next batch boundary, keep the last checkpoint."""


class Diverged(Exception):
    """The training loss became NaN or infinite."""


class StopFlag:
    """Set by SIGINT / SIGTERM, or by ``<run>/stop.requested`` (``fairtui stop`` in the first moments of a
    run, before the engine has its signal handler); the loop polls it between batches."""

    def __init__(self, run_dir: Path | None = None) -> None:
        self.requested = False
        self.marker = run_dir / STOP_MARKER if run_dir is not None else None

    def __call__(self) -> bool:
        if not self.requested and self.marker is not None and self.marker.exists():
            self.requested = True
            log.warning("stop requested (%s): stopping after this batch", STOP_MARKER)
        return self.requested

    def install(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            if self.requested and signum == signal.SIGINT:  # a second Ctrl-C: leave now, the last
                raise KeyboardInterrupt                     # checkpoint is on disk
            if self.requested:  # SIGTERM again is the same request: Slurm's scancel reaches a rank
                return          # directly and again through its launcher
            self.requested = True
            log.warning("%s received: stopping after this batch", signal.Signals(signum).name)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)


def setup_logging(rank: int | None = None) -> None:
    """INFO to stderr (``engine.log``); in a multi-process run every line names its rank, and ranks
    other than 0 log warnings and errors only (rank 0 tells the run's story once)."""
    where = f" rank{rank}" if rank is not None else ""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO if not rank else logging.WARNING,
                        format=f"%(asctime)s{where} %(levelname)s %(message)s", datefmt="%H:%M:%S")


def write_process_file(run_dir: Path, command: str, pid: int | None = None, signals: bool = True,
                       **extra: Any) -> None:
    """``engine.json``: who is running this folder (for `fairtui stop` and liveness checks). Its one writer:
    the launcher (``pid``: the engine it just started, ``signals`` False), the engine itself and the
    supervisor of a multi-process run. ``signals``: the process's handler is installed, so SIGTERM stops
    it cleanly (before that, `fairtui stop` leaves STOP_MARKER instead of a signal that would kill it)."""
    from engine.atomic import atomic_write_json

    pid = os.getpid() if pid is None else pid
    atomic_write_json(run_dir / "engine.json", {"pid": pid, "host": socket.gethostname(), "started": time.time(),
                                                "command": command, "proc_start": process_start_time(pid),
                                                **({"signals": True} if signals else {}), **extra})


def add_ranks(run_dir: Path, ranks: list[dict[str, Any]]) -> None:
    """Name every rank's process in ``engine.json`` (rank 0, once the group has formed)."""
    import json

    from engine.atomic import atomic_write_json

    try:
        info = json.loads((run_dir / "engine.json").read_text())
    except (OSError, ValueError):
        return
    atomic_write_json(run_dir / "engine.json", {**info, "world_size": len(ranks), "ranks": ranks})


def acquire_lock(run_dir: Path) -> Any:
    """An exclusive lock on ``<run>/.lock`` for the life of the process; None if another engine holds it."""
    from engine.locks import try_lock

    return try_lock(run_dir / ".lock")


def exit_now(code: int) -> NoReturn:
    """End a rank of a multi-process run now, its files closed and its streams flushed. In the
    interpreter's own teardown, what torch.distributed leaves behind can abort the process
    ("terminate called without an active exception", SIGABRT; seen under torchrun on a loaded
    machine), and the launcher would report a finished run's rank as failed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def guarded(run_dir: Path, events: Any, body: Callable[[], None], group: Any = None) -> int:
    """Run ``body``; turn its outcome into a `run_finished` event and an exit code.

    In a multi-process run, a rank other than 0 writes no event: a failure goes to ``.rank<r>.failed``
    on the run folder. When a collective operation failed (another rank died first), rank 0 of a
    supervised run does the same (the supervisor knows which rank died); rank 0 under another
    launcher (torchrun on several nodes, Slurm) reads its peers' files itself (:func:`peer_failure`).
    """
    if group is not None and group.active:
        return _guarded_rank(run_dir, events, _told_to_launcher(body), group)
    return _guarded(run_dir, events, body)


def _told_to_launcher(body: Callable[[], None]) -> Callable[[], None]:
    """``body``, whose own exception (not a peer's failure seen in a collective) is also written where
    torch's launcher reads it (TORCHELASTIC_ERROR_FILE): torchrun's summary then names it."""
    from engine.distributed import is_collective_error

    def told() -> None:
        try:
            body()
        except (StopRequested, KeyboardInterrupt):
            raise
        except Exception as err:
            if os.environ.get("TORCHELASTIC_ERROR_FILE") and not is_collective_error(err):
                with contextlib.suppress(Exception):
                    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

                    ErrorHandler().record_exception(err)
            raise

    return told


def _guarded_rank(run_dir: Path, events: Any, body: Callable[[], None], group: Any) -> int:
    from engine.distributed import is_collective_error

    def own_body() -> None:
        try:
            body()
        except (StopRequested, KeyboardInterrupt):
            raise
        except BaseException as err:
            collective = is_collective_error(err)
            reason = _one_line(err)
            if group.is_main and not group.supervised:  # rank 0 accounts for the run itself
                if collective:
                    raise PeersFailed(peer_failure(run_dir, group.world, group.members, reason)) from err
                raise
            write_failure(run_dir, group.rank, reason, collective)
            if collective or not group.is_main:
                log.error("%s", traceback.format_exc() if not collective else reason)
                raise _Silent(EXIT_FAILED) from None
            raise

    if not group.is_main:
        try:
            own_body()
        except (StopRequested, KeyboardInterrupt):
            return EXIT_STOPPED
        except _Silent as quiet:
            return quiet.code
        return EXIT_OK
    try:
        return _guarded(run_dir, events, own_body)
    except _Silent as quiet:
        return quiet.code


class PeersFailed(Exception):
    """Rank 0 of a run under torchrun saw a collective fail; its message names the rank that failed."""


class _Silent(BaseException):
    """A rank's failure that the supervisor reports (no event from this rank)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _one_line(err: BaseException) -> str:
    from engine.atomic import DiskFull
    from engine.checkpoint import CheckpointError
    from engine.data.tensors import DataError

    if isinstance(err, (ProfileError, CheckpointError, Diverged, DataError, DiskFull)):
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{type(err).__name__}: {err}".splitlines()[0]


def _guarded(run_dir: Path, events: Any, body: Callable[[], None]) -> int:
    from engine.atomic import DiskFull
    from engine.checkpoint import CheckpointError
    from engine.data.tensors import DataError

    try:
        body()
    except (StopRequested, KeyboardInterrupt):
        events.emit("run_finished", status="stopped", error="stopped by a signal; the last checkpoint is kept")
        return EXIT_STOPPED
    except (ProfileError, CheckpointError) as err:
        events.emit("run_finished", status="failed", error=str(err))
        log.error("%s", err)
        return EXIT_USAGE
    except (Diverged, DataError, DiskFull, PeersFailed) as err:
        events.emit("run_finished", status="failed", error=str(err))
        log.error("%s", err)
        return EXIT_FAILED
    except Exception as err:  # the reason goes to the event stream; the traceback to engine.log
        log.error("%s", traceback.format_exc())
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        events.emit("run_finished", status="failed", error=reason)
        return EXIT_FAILED
    events.emit("run_finished", status="completed")
    return EXIT_OK


FAILURE_FILE = "command.failed.json"


def report_failure(run_dir: Path, command: str, reason: str, code: int) -> int:
    """A command (eval, import) that fails for a reason a user can act on: the one line on stderr (and
    so in engine.log) and in ``<run>/command.failed.json`` for the CLI, which reads it there rather than
    from log text. Returns ``code``, the exit code."""
    from engine.atomic import atomic_write_json

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
    from engine.atomic import atomic_write_json

    try:
        atomic_write_json(failure_file(run_dir, rank), {"rank": rank, "reason": reason, "collective": collective})
    except OSError:
        pass


PEER_GRACE_S = 10.0  # how long rank 0 waits for its peers' failure files after a collective failed


def clear_failures(run_dir: Path) -> None:
    """Remove the ``.rank<r>.failed`` files of an earlier attempt (rank 0, before the group forms)."""
    for path in run_dir.glob(".rank*.failed"):
        path.unlink(missing_ok=True)


def peer_failure(run_dir: Path, world: int, members: list[dict[str, Any]] | None, seen: str,
                 grace_s: float = PEER_GRACE_S) -> str:
    """Which rank made rank 0's collective fail, for a run whose launcher rank 0 cannot ask (torchrun on
    several nodes, Slurm): the ranks share the run folder, and every rank that fails leaves its reason
    there (:func:`write_failure`). Rank 0 waits up to ``grace_s`` for all of them, then names a rank's
    own error, else the ranks that left nothing (killed, or their node was lost: ``members`` gives
    their host and pid), else what rank 0 saw (``seen``)."""
    import json

    found: dict[int, dict] = {}
    deadline = time.monotonic() + grace_s
    while True:
        for rank in range(1, world):
            if rank not in found:
                try:
                    found[rank] = json.loads(failure_file(run_dir, rank).read_text())
                except (OSError, ValueError):
                    pass
        own = [r for r in sorted(found) if not found[r].get("collective")]
        if own or len(found) == world - 1 or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for rank in found:
        failure_file(run_dir, rank).unlink(missing_ok=True)
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
