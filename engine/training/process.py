"""What every engine command (train, eval, import) shares as a process: the stop flag, logging, the run lock,
and the one rule that turns a command's outcome into a `run_finished` event and an exit code. The run
folder's protocol it follows (exit codes, stop marker, ``engine.json``, failure files) is
engine.contract.protocol, which the app reads too.

Torch-free at import; what it imports lazily, to classify an error, never imports it back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, NoReturn

from engine.contract.profile_schema import ProfileError
# the run folder's protocol (exit codes, stop marker, engine.json, failure files) lives in the contract, where
# the app reads it; named here too for the engine's modules
from engine.contract.protocol import (EXIT_FAILED, EXIT_OK, EXIT_STOPPED, EXIT_USAGE,  # noqa: F401
                                      FAILURE_FILE, PEER_GRACE_S, STOP_MARKER, add_ranks, clear_failures,
                                      failure_file, peer_failure, read_failure, report_failure, write_failure,
                                      write_process_file)

log = logging.getLogger("engine")


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


def acquire_lock(run_dir: Path) -> Any:
    """The run's engine lock (``<run>/engine.lock``, engine.contract.protocol.ENGINE_LOCK) for the life of the
    process: the one the launcher took and handed down (its descriptor in LOCK_FD_ENV), else taken here; None
    if another engine holds it."""
    import fcntl

    from engine.contract.locks import try_lock
    from engine.contract.protocol import ENGINE_LOCK, LOCK_FD_ENV

    path = run_dir / ENGINE_LOCK
    handed = os.environ.pop(LOCK_FD_ENV, None)  # the ranks and any child start without it
    if handed is not None:
        with contextlib.suppress(ValueError, OSError):
            fd = int(handed)
            held = os.fstat(fd)
            mine = os.stat(path)
            if (held.st_dev, held.st_ino) == (mine.st_dev, mine.st_ino):
                fh = os.fdopen(fd, "a")
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # already ours: the same open file description
                return fh
    return try_lock(path, patience=0.5)  # a reader's probe holds it for an instant


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
    from engine.training.distributed import is_collective_error

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
    from engine.training.distributed import is_collective_error

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
    from engine.contract.atomic import DiskFull
    from engine.runtime.checkpoint import CheckpointError
    from engine.data.tensors import DataError

    if isinstance(err, (ProfileError, CheckpointError, Diverged, DataError, DiskFull)):
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{type(err).__name__}: {err}".splitlines()[0]


def _guarded(run_dir: Path, events: Any, body: Callable[[], None]) -> int:
    from engine.contract.atomic import DiskFull
    from engine.runtime.checkpoint import CheckpointError
    from engine.data.tensors import DataError

    try:
        body()
    except (StopRequested, KeyboardInterrupt) as err:
        # where it stopped, when the loop says (a stop inside an epoch keeps that epoch's work: partial.pt)
        said = str(err) if isinstance(err, StopRequested) and str(err) else "; the last checkpoint is kept"
        events.emit("run_finished", status="stopped", error=f"stopped by a signal{said}")
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


