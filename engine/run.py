"""The engine process: train a run folder, or evaluate one, and exit with DESIGN.md's codes.

Exit codes: 0 completed; 1 failed (the reason in `run_finished` and on
stderr); 2 a bad profile; 130 stopped by SIGINT / SIGTERM (last checkpoint kept).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from engine.config import load_run_profile, profile_warnings
from engine.events import EventWriter
from engine.procinfo import process_start_time
from engine.profile_schema import ProfileError

log = logging.getLogger("engine")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 130


STOP_MARKER = "stop.requested"  # `fairtui stop` leaves it: a stop asked before the engine could take a signal


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
            if self.requested:  # a second Ctrl-C: leave now, the last checkpoint is on disk
                raise KeyboardInterrupt
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


def write_process_file(run_dir: Path, command: str) -> None:
    """``engine.json``: who is running this folder (for `fairtui stop` and liveness checks)."""
    from engine.atomic import atomic_write_json

    # "signals": the engine's handler is installed, so SIGTERM stops it cleanly (before this, the file
    # is the launcher's, and `fairtui stop` leaves STOP_MARKER instead of a signal that would kill it)
    atomic_write_json(run_dir / "engine.json", {"pid": os.getpid(), "host": socket.gethostname(),
                                                "started": time.time(), "command": command,
                                                "proc_start": process_start_time(os.getpid()), "signals": True})


def acquire_lock(run_dir: Path) -> Any:
    """An exclusive lock on ``<run>/.lock`` for the life of the process; None if another engine holds it."""
    import fcntl

    fh = open(run_dir / ".lock", "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return None
    return fh


def guarded(run_dir: Path, events: EventWriter, body: Callable[[], None], group: Any = None) -> int:
    """Run ``body``; turn its outcome into a `run_finished` event and an exit code.

    In a supervised multi-process run, a rank other than 0 writes no event: a failure goes to
    ``.rank<r>.failed`` for the supervisor. Rank 0 does the same when a collective operation failed
    (another rank died first: the supervisor knows which).
    """
    if group is not None and group.active and group.supervised:
        return _guarded_rank(run_dir, events, body, group)
    return _guarded(run_dir, events, body)


def _guarded_rank(run_dir: Path, events: EventWriter, body: Callable[[], None], group: Any) -> int:
    from engine.distributed import is_collective_error
    from engine.supervisor import write_failure
    from engine.trainer import StopRequested

    def own_body() -> None:
        try:
            body()
        except (StopRequested, KeyboardInterrupt):
            raise
        except BaseException as err:
            collective = is_collective_error(err)
            reason = _one_line(err)
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


class _Silent(BaseException):
    """A rank's failure that the supervisor reports (no event from this rank)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _one_line(err: BaseException) -> str:
    from engine.atomic import DiskFull
    from engine.checkpoint import CheckpointError
    from engine.data import DataError
    from engine.trainer import Diverged

    if isinstance(err, (ProfileError, CheckpointError, Diverged, DataError, DiskFull)):
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{type(err).__name__}: {err}".splitlines()[0]


def _guarded(run_dir: Path, events: EventWriter, body: Callable[[], None]) -> int:
    from engine.atomic import DiskFull
    from engine.checkpoint import CheckpointError
    from engine.data import DataError
    from engine.trainer import Diverged, StopRequested

    try:
        body()
    except (StopRequested, KeyboardInterrupt):
        events.emit("run_finished", status="stopped", error="stopped by a signal; the last checkpoint is kept")
        return EXIT_STOPPED
    except (ProfileError, CheckpointError) as err:
        events.emit("run_finished", status="failed", error=str(err))
        log.error("%s", err)
        return EXIT_USAGE
    except (Diverged, DataError, DiskFull) as err:
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


def train(run_dir: Path, nproc: int = 1) -> int:
    from engine.distributed import Group

    group = Group.from_env()
    setup_logging(group.rank if group.active else None)
    try:
        profile = load_run_profile(run_dir)
    except ProfileError as err:
        print(err, file=sys.stderr)
        return EXIT_USAGE
    if profile.source is not None:
        print(f"{run_dir}: an imported model does not train (fairtui eval evaluates it)", file=sys.stderr)
        return EXIT_USAGE
    for warning in profile_warnings(profile) if not group.active or group.is_main else ():
        log.warning(warning)
    if nproc > 1 and not group.active:
        from engine.supervisor import supervise

        return supervise(run_dir, nproc)
    # A supervised rank runs under its supervisor's lock and engine.json; under another launcher
    # (torchrun, srun) rank 0 takes them.
    owner = group.is_main and not group.supervised
    lock = acquire_lock(run_dir) if owner else True
    if lock is None:
        print(f"{run_dir}: another engine is already running this folder", file=sys.stderr)
        return EXIT_USAGE
    stop = StopFlag(run_dir)
    stop.install()
    if owner:
        write_process_file(run_dir, "train")
    from engine.trainer import NoEvents

    events: Any = EventWriter(run_dir / "events.jsonl", run_dir.name) if group.is_main else NoEvents()

    def body() -> None:
        from engine.final_eval import final_evaluation
        from engine.progress import Progress
        from engine.trainer import Trainer
        from engine.utils import make_runtime

        runtime = make_runtime(profile.train, group.local_rank, group.world)
        group.init(runtime.device, profile.train.dist_timeout)
        log.info("run %s on %s%s", run_dir.name, runtime.describe(),
                 f" (rank {group.rank} of {group.world}, {group.backend})" if group.active else "")
        trainer = Trainer(run_dir, profile, runtime, events, Progress(run_dir / "progress.json"), stop, group)
        trainer.fit()
        group.close()  # the test evaluation runs on rank 0 alone; the other ranks are done
        if group.is_main:
            final_evaluation(trainer)

    try:
        return guarded(run_dir, events, body, group)
    finally:
        events.close()
        if owner and stop.requested:
            (run_dir / STOP_MARKER).unlink(missing_ok=True)  # honoured: the next resume starts clean


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m engine", description="fairtui's training engine")
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train the run folder (resumes from its last checkpoint)")
    p_train.add_argument("run_dir", type=Path)
    p_train.add_argument("--nproc", type=int, default=1,
                         help="processes (one per GPU of CUDA_VISIBLE_DEVICES, or CPU processes): DDP")
    p_eval = sub.add_parser("eval", help="evaluate a run's checkpoint under named attacks")
    p_eval.add_argument("run_dir", type=Path)
    p_eval.add_argument("--request", required=True, help="JSON: attacks, checkpoint, split, ...")
    p_import = sub.add_parser("import", help="import the model named by the run folder's [source] table")
    p_import.add_argument("run_dir", type=Path)
    p_import.add_argument("--request", default="{}", help="JSON (reserved)")
    args = parser.parse_args(argv)
    if not (args.run_dir / "profile.toml").exists():
        print(f"{args.run_dir}: not a run folder (no profile.toml)", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "train":
        if args.nproc < 1:
            print(f"--nproc must be at least 1, got {args.nproc}", file=sys.stderr)
            return EXIT_USAGE
        return train(args.run_dir, args.nproc)
    if args.command == "import":
        from engine.imported import import_run

        return import_run(args.run_dir, json.loads(args.request))
    from engine.eval_run import evaluate_run

    return evaluate_run(args.run_dir, json.loads(args.request))
