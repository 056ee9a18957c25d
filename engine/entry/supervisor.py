"""A multi-process run on one machine: ``python -m engine train RUN --nproc N``.

The N ranks are started by torch.distributed's own launcher (``elastic_launch``, what ``torchrun
--standalone --nproc-per-node N`` runs): a c10d rendezvous on 127.0.0.1, the ranks' environment
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``...), one GPU of ``CUDA_VISIBLE_DEVICES``
per rank (the launcher's ``virtual_local_rank``: each rank sees its GPU as ``cuda:0``), watching the
ranks and ending the rest when one dies (SIGTERM, SIGKILL after ``SHUTDOWN_S``), and passing SIGTERM
and SIGINT on to every rank. No restarts: a run that fails is resumed by ``fairtui resume``.

What this module adds, as thinly as it can, is what a run folder needs and the launcher does not give:

- the run's lock, and ``engine.json`` naming this process (what ``fairtui stop`` signals and what
  liveness checks; rank 0 adds every rank's pid once the group has formed);
- each rank dies with this process (PR_SET_PDEATHSIG, set by the rank itself, see
  :func:`engine.training.distributed.die_with_supervisor`): a killed launcher never leaves ranks unwatched;
- ``run_finished`` when rank 0 could not write it. Rank 0 writes the events of a run it can account
  for (completed, stopped, its own failure). A rank that failed leaves ``.rank<r>.failed`` (its
  one-line reason, and whether it only saw another rank fail); the launcher names the rank that died
  without a word, with its pid and signal or exit code. The reason given is a rank's own error first,
  else the rank the launcher saw die.

The stop at the same batch, the per-epoch rank checks and the exactness of the sums are the ranks'
own (engine.training.distributed); a SIGTERM reaches every rank through the launcher.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from engine.training.distributed import ENV_SUPERVISED
from engine.contract.protocol import clear_end, engine_args, read_failures
from engine.training.process import (EXIT_FAILED, EXIT_OK, EXIT_STOPPED, EXIT_USAGE, acquire_lock, failure_file,
                            write_process_file)

log = logging.getLogger("engine")

SHUTDOWN_S = 30  # after a rank's failure or a stop signal, how long the ranks have to end by themselves
MONITOR_S = 0.1  # how often the launcher looks at its ranks


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def visible_devices(nproc: int) -> list[str] | None:
    """The GPUs of CUDA_VISIBLE_DEVICES, one per rank; None: the CPU (unset or empty)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return None
    devices = [d.strip() for d in visible.split(",") if d.strip()]
    if len(devices) < nproc:
        raise ValueError(f"{nproc} processes asked for, but CUDA_VISIBLE_DEVICES={visible} names "
                         f"{len(devices)} GPU(s)")
    twice = sorted({d for d in devices[:nproc] if devices[:nproc].count(d) > 1})
    if twice:  # NCCL: "Duplicate GPU detected" (seen on an H100, NCCL 2.28), after the ranks have started
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible} gives GPU {', '.join(twice)} to several of the {nproc} "
                         "processes; NCCL runs one process per GPU")
    return devices[:nproc]


LAUNCHER_DIR = ".launcher"  # in the run folder: the launcher's error files while it runs, removed after


def launch_config(run_dir: Path, nproc: int, on_gpus: bool) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    import dataclasses

    # Keys that only newer torch releases have (torch 2.11 has neither shutdown_timeout nor, before 2.6,
    # virtual_local_rank): passed where this torch's LaunchConfig takes them, else its default stands.
    optional = {"virtual_local_rank": on_gpus, "shutdown_timeout": SHUTDOWN_S}
    known = {f.name for f in dataclasses.fields(LaunchConfig)}
    return LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"fairtui-{os.getpid()}",
                        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / LAUNCHER_DIR)),
                        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", local_addr="127.0.0.1",
                        max_restarts=0, monitor_interval=MONITOR_S, start_method="spawn",
                        **{k: v for k, v in optional.items() if k in known})


def launch(run_dir: Path, nproc: int, on_gpus: bool) -> tuple[dict[int, Any], bool]:
    """Run the ranks to their end: (the launcher's failures by rank, whether a stop signal came)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException, _terminate_process_handler
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    # the launcher's own handler, from now rather than from when the ranks start: a stop during the
    # rendezvous ends it the same way
    signal.signal(signal.SIGTERM, _terminate_process_handler)
    signal.signal(signal.SIGINT, _terminate_process_handler)
    os.environ[ENV_SUPERVISED] = str(os.getpid())
    try:
        elastic_launch(launch_config(run_dir, nproc, on_gpus), sys.executable)(*engine_args("train", run_dir))
    except ChildFailedError as err:
        return dict(err.failures), False
    except SignalException as err:
        log.warning("%s received: the ranks were asked to stop", signal.Signals(err.sigval).name)
        return {}, True
    return {}, False


def launcher_message(failure: Any) -> str | None:
    """The exception a rank wrote to the launcher's error file (see engine.training.process), if it did."""
    message = (failure.error_file_data or {}).get("message")
    if isinstance(message, dict):
        message = message.get("message")
    return message if isinstance(message, str) and message != "<NONE>" else None


def reason(launcher: dict[int, Any], own: dict[int, dict]) -> str:
    """The first cause: a rank's own error (its failure file, else the launcher's error file), else a rank
    the launcher saw die, else the first exit."""
    errors = [f for _, f in sorted(own.items()) if not f.get("collective")]
    if errors:
        return f"rank {errors[0]['rank']}: {errors[0]['reason']}"
    told = [(r, launcher_message(f)) for r, f in sorted(launcher.items()) if launcher_message(f)]
    if told:
        return f"rank {told[0][0]}: {told[0][1]}"
    silent = sorted((f.timestamp, r) for r, f in launcher.items() if r not in own)
    if silent:
        rank = silent[0][1]
        return (f"rank {rank} (pid {launcher[rank].pid}) {describe_exit(launcher[rank].exitcode)}; the other "
                "ranks were stopped and the last checkpoint is kept")
    if launcher:
        rank = min(launcher)
        return f"rank {rank} {describe_exit(launcher[rank].exitcode)}"
    return "the ranks ended without one saying why"


def outcome(run_dir: Path, nproc: int, launcher: dict[int, Any], stopped: bool, first_seq: int) -> int:
    """Write ``run_finished`` if rank 0 did not; return the exit code (engine.contract.protocol: 0, 1, 2, 130)."""
    from engine.contract.events import EventWriter, read_events

    own = read_failures(run_dir, range(nproc))
    events, _ = read_events(run_dir / "events.jsonl")
    finished = [e for e in events if e.get("type") == "run_finished" and e.get("seq", -1) >= first_seq]
    if finished:  # rank 0 accounted for the run: its exit code is the run's (after a stop signal the
        # launcher gives no exit codes, and the status says it)
        if 0 in launcher:
            return launcher[0].exitcode
        return {"completed": EXIT_OK, "stopped": EXIT_STOPPED}.get(finished[-1].get("status"), EXIT_FAILED)
    if not launcher and not stopped:  # every rank exited 0, rank 0 without a word: a bug, never a success
        status, why = "failed", "rank 0 exited without recording how the run ended"
    elif stopped and not own and all(f.exitcode in (-signal.SIGTERM, -signal.SIGKILL, EXIT_STOPPED)
                                     for f in launcher.values()):
        status, why = "stopped", "stopped by a signal; the last checkpoint is kept"
    else:
        status, why = "failed", reason(launcher, own)
    writer = EventWriter(run_dir / "events.jsonl", run_dir.name)
    try:
        writer.emit("run_finished", status=status, error=why)
    finally:
        writer.close()
    return EXIT_STOPPED if status == "stopped" else EXIT_FAILED


def supervise(run_dir: Path, nproc: int) -> int:
    """Run ``run_dir`` on ``nproc`` ranks started by torch's launcher."""
    from engine.contract.events import EventWriter

    lock = acquire_lock(run_dir)
    if lock is None:
        print(f"{run_dir}: another engine is already running this folder", file=sys.stderr)
        return EXIT_USAGE
    try:
        devices = visible_devices(nproc)
    except ValueError as err:
        print(f"{run_dir}: {err}", file=sys.stderr)
        return EXIT_USAGE
    writer = EventWriter(run_dir / "events.jsonl", run_dir.name)
    first_seq = writer.seq  # what the ranks write from here on is this attempt's
    writer.close()
    for rank in range(nproc):
        failure_file(run_dir, rank).unlink(missing_ok=True)
    write_process_file(run_dir, "train", world_size=nproc)
    clear_end(run_dir)  # an end recorded beside the stream (a refused start, a kill) was the last session's
    log.info("run %s: starting %d ranks with torch.distributed's launcher", run_dir.name, nproc)
    try:
        launcher, stopped = launch(run_dir, nproc, devices is not None)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the ranks are gone; what is left is bookkeeping
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return outcome(run_dir, nproc, launcher, stopped, first_seq)
    finally:
        shutil.rmtree(run_dir / LAUNCHER_DIR, ignore_errors=True)
