"""`python -m engine train RUN`: train a run folder (resuming from its last checkpoint), on one process
or, with ``--nproc N``, on N under the supervisor."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from engine.contract.config import profile_warnings
from engine.contract.profile_io import load_run_profile
from engine.contract.protocol import clear_end
from engine.training.process import (EXIT_USAGE, STOP_MARKER, StopFlag, acquire_lock, add_ranks, clear_failures, exit_now,
                            guarded, setup_logging, write_process_file)
from engine.contract.profile_schema import ProfileError

log = logging.getLogger("engine")


def train(run_dir: Path, nproc: int = 1) -> int:
    """Train ``run_dir`` in this process, as one rank of a group, or (``nproc`` > 1 and no group yet) under
    the supervisor. Which process does what is :class:`engine.training.distributed.Group`'s to say."""
    from engine.training.distributed import Group, die_with_supervisor

    group = Group.from_env()
    if group.supervised:
        die_with_supervisor()
    setup_logging(group.rank if group.active else None)
    profile = _checked_profile(run_dir, group)
    if profile is None:
        return EXIT_USAGE
    if nproc > 1 and not group.active:
        from engine.entry.supervisor import supervise

        return supervise(run_dir, nproc)
    stop = StopFlag(run_dir)
    stop.install()  # before engine.json says that SIGTERM stops this process cleanly
    lock = _take_folder(run_dir) if group.owns_folder else True
    if lock is None:
        print(f"{run_dir}: another engine is already running this folder", file=sys.stderr)
        return EXIT_USAGE
    if group.owns_folder and not group.active and stop():
        return _stopped_before_training(run_dir, stop)
    if group.owns_folder and group.active:
        clear_failures(run_dir)  # an earlier attempt's: the ranks' failure files name this one's
    events, progress = group.writers(run_dir)
    mirrors: list = []
    if group.is_main and profile.train.log_to:  # dashboards: each event, once written, handed on (engine.runtime.sinks)
        from engine.runtime.sinks import live_mirrors

        mirrors = live_mirrors(run_dir, profile)
        events.listeners.extend(mirrors)
    try:
        code = guarded(run_dir, events, lambda: _fit(run_dir, profile, group, events, progress, stop), group)
    finally:
        for mirror in mirrors:
            mirror.close()
        events.close()
        if group.owns_folder and stop.requested:
            (run_dir / STOP_MARKER).unlink(missing_ok=True)  # honoured: the next resume starts clean
    if group.active or any(mirror.abandoned for mirror in mirrors):
        exit_now(code)  # a dashboard call that never returned would hold the interpreter's exit (its atexit hooks)
    return code


def _stopped_before_training(run_dir: Path, stop: Any) -> int:
    """A stop asked while the engine started (Ctrl-C in the first seconds): nothing trained in this session, the
    run is recorded stopped beside its stream (engine.contract.protocol.record_end), and the next resume starts
    clean. Exit 130, as any stop."""
    from engine.contract.protocol import record_end
    from engine.training.process import EXIT_STOPPED

    started = (run_dir / "events.jsonl").exists() and (run_dir / "events.jsonl").stat().st_size > 0
    record_end(run_dir, "stopped", "stopped before training " + ("resumed" if started else "began")
               + ": `fairtui resume` starts it")
    (run_dir / STOP_MARKER).unlink(missing_ok=True)
    log.warning("stopped before training %s (a stop was asked while the engine started)",
                "resumed" if started else "began")
    return EXIT_STOPPED


def _checked_profile(run_dir: Path, group: Any) -> Any:
    """The run's profile, or None (said on stderr) when it cannot train; its warnings, once (rank 0)."""
    try:
        profile = load_run_profile(run_dir)
    except ProfileError as err:
        print(err, file=sys.stderr)
        return None
    if profile.source is not None:
        print(f"{run_dir}: an imported model does not train (fairtui eval evaluates it)", file=sys.stderr)
        return None
    if group.is_main:
        for warning in profile_warnings(profile):
            log.warning(warning)
        if group.nodes > 1:
            from engine.contract.storage import local_filesystem

            if fs := local_filesystem(run_dir):
                log.warning("%s is on %s, which looks local to this machine: a run across %d nodes needs its run "
                            "folder on storage every node sees (NFS, Lustre...)", run_dir.resolve(), fs, group.nodes)
    return profile


def _take_folder(run_dir: Path) -> Any:
    """The run's engine lock (None: another engine has it), engine.json naming this process, and an end
    recorded beside the stream for the last session (a refused start, a kill) cleared."""
    lock = acquire_lock(run_dir)
    if lock is not None:
        write_process_file(run_dir, "train")
        clear_end(run_dir)
    return lock


def _fit(run_dir: Path, profile: Any, group: Any, events: Any, progress: Any, stop: Any) -> None:
    from engine.training.final_eval import final_evaluation
    from engine.training.trainer import Trainer
    from engine.runtime.device import make_runtime

    runtime = make_runtime(profile.train, group.local_rank, group.world)
    if runtime.device.type == "cpu" and not group.active:
        from engine.runtime.cpuload import warn_if_busy

        warn_if_busy()
    group.init(runtime.device, profile.train.dist_timeout)
    if group.active:
        ranks = group.processes(runtime.device)
        if group.is_main:
            add_ranks(run_dir, ranks)
    log.info("run %s on %s%s", run_dir.name, runtime.describe(),
             f" (rank {group.rank} of {group.world}, {group.backend})" if group.active else "")
    trainer = Trainer(run_dir, profile, runtime, events, progress, stop, group)
    trainer.fit()
    group.close()  # the test evaluation runs on rank 0 alone; the other ranks are done
    if group.is_main and profile.eval.test_at_end:
        final_evaluation(trainer)
