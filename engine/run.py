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

from engine.config import load_profile
from engine.events import EventWriter
from engine.procinfo import process_start_time
from engine.profile_schema import ProfileError

log = logging.getLogger("engine")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 130


class StopFlag:
    """Set by SIGINT / SIGTERM; the loop polls it between batches."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self) -> bool:
        return self.requested

    def install(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            if self.requested:  # a second Ctrl-C: leave now, the last checkpoint is on disk
                raise KeyboardInterrupt
            self.requested = True
            log.warning("%s received: stopping after this batch", signal.Signals(signum).name)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)


def setup_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")


def write_process_file(run_dir: Path, command: str) -> None:
    """``engine.json``: who is running this folder (for `fairtui stop` and liveness checks)."""
    from engine.atomic import atomic_write_json

    atomic_write_json(run_dir / "engine.json", {"pid": os.getpid(), "host": socket.gethostname(),
                                                "started": time.time(), "command": command,
                                                "proc_start": process_start_time(os.getpid())})


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


def guarded(run_dir: Path, events: EventWriter, body: Callable[[], None]) -> int:
    """Run ``body``; turn its outcome into a `run_finished` event and an exit code."""
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


def train(run_dir: Path) -> int:
    setup_logging()
    try:
        profile = load_profile(run_dir / "profile.toml")
    except ProfileError as err:
        print(err, file=sys.stderr)
        return EXIT_USAGE
    if profile.source is not None:
        print(f"{run_dir}: an imported model does not train (fairtui eval evaluates it)", file=sys.stderr)
        return EXIT_USAGE
    lock = acquire_lock(run_dir)
    if lock is None:
        print(f"{run_dir}: another engine is already running this folder", file=sys.stderr)
        return EXIT_USAGE
    stop = StopFlag()
    stop.install()
    write_process_file(run_dir, "train")
    events = EventWriter(run_dir / "events.jsonl", run_dir.name)

    def body() -> None:
        from engine.final_eval import final_evaluation
        from engine.progress import Progress
        from engine.trainer import Trainer
        from engine.utils import make_runtime

        runtime = make_runtime(profile.train)
        log.info("run %s on %s", run_dir.name, runtime.describe())
        trainer = Trainer(run_dir, profile, runtime, events, Progress(run_dir / "progress.json"), stop)
        trainer.fit()
        final_evaluation(trainer)

    try:
        return guarded(run_dir, events, body)
    finally:
        events.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m engine", description="fairtui's training engine")
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train the run folder (resumes from its last checkpoint)")
    p_train.add_argument("run_dir", type=Path)
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
        return train(args.run_dir)
    if args.command == "import":
        from engine.imported import import_run

        return import_run(args.run_dir, json.loads(args.request))
    from engine.eval_run import evaluate_run

    return evaluate_run(args.run_dir, json.loads(args.request))
