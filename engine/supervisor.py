"""The supervisor of a multi-process run: ``python -m engine train RUN --nproc N``.

It starts the N ranks the way ``torchrun --standalone --nproc-per-node N`` does
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``), each rank on one GPU of ``CUDA_VISIBLE_DEVICES`` (its own
``CUDA_VISIBLE_DEVICES``), and stands for the group as one run:

- ``engine.json`` names the supervisor (what ``fairtui stop`` signals and what
  liveness checks) and every rank's pid. The supervisor holds the run's lock.
- SIGTERM / SIGINT are passed to every rank; the ranks stop together at the
  next batch (a lockstep all-reduce of their stop flags) and rank 0 records
  ``stopped``.
- A rank that dies or fails ends the run: the others get ``GRACE_S`` seconds to
  notice (a collective fails at once with gloo, or after ``train.dist_timeout``)
  and are then killed. ``run_finished`` says ``failed`` with the first cause,
  and the last checkpoint (written atomically by rank 0) is kept for a resume.
- A rank dies with the supervisor (PR_SET_PDEATHSIG): a killed supervisor never
  leaves ranks training unwatched.

Rank 0 writes the events of a run it can account for (completed, stopped, its
own failure). A rank's failure is written to ``.rank<r>.failed`` (one line);
the supervisor writes ``run_finished`` when rank 0 could not.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine.distributed import ENV_SUPERVISED
from engine.process import (EXIT_FAILED, EXIT_STOPPED, EXIT_USAGE, acquire_lock, failure_file,
                            write_process_file)

log = logging.getLogger("engine")

GRACE_S = 10.0  # after a rank's failure, how long the others have to end by themselves
POLL_S = 0.1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the supervisor dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class Supervisor:
    def __init__(self, run_dir: Path, nproc: int):
        self.run_dir, self.nproc = run_dir, nproc
        self.procs: list[subprocess.Popen] = []
        self.stop_requested = False
        self.first_failure: tuple[float, int, int] | None = None  # (when, rank, code)

    def devices(self) -> list[str] | None:
        """Each rank's GPU from the supervisor's CUDA_VISIBLE_DEVICES; None: the CPU, or GPUs by index."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None or not visible.strip():
            return None
        devices = [d.strip() for d in visible.split(",") if d.strip()]
        if len(devices) < self.nproc:
            raise ValueError(f"{self.nproc} processes asked for, but CUDA_VISIBLE_DEVICES={visible} names "
                             f"{len(devices)} GPU(s)")
        return devices[:self.nproc]

    def start(self) -> None:
        devices = self.devices()
        port = free_port()
        for rank in range(self.nproc):
            failure_file(self.run_dir, rank).unlink(missing_ok=True)
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(self.nproc), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(self.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       **{ENV_SUPERVISED: "1"})
            if devices is not None:
                env["CUDA_VISIBLE_DEVICES"] = devices[rank]
            self.procs.append(subprocess.Popen([sys.executable, "-m", "engine", "train", str(self.run_dir)],
                                               env=env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent))
        self.write_process_file(devices)

    def write_process_file(self, devices: list[str] | None) -> None:
        from engine.procinfo import process_start_time

        ranks = [{"rank": r, "pid": p.pid, "proc_start": process_start_time(p.pid),
                  "gpu": devices[r] if devices else None} for r, p in enumerate(self.procs)]
        # signals: its handler is installed before the ranks start
        write_process_file(self.run_dir, "train", world_size=self.nproc, ranks=ranks)

    def forward_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested = True
        log.warning("%s received: passing it to the %d ranks", signal.Signals(signum).name, self.nproc)
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def wait(self) -> list[int]:
        """Wait for every rank; after the first failure, kill what is left once the grace has passed."""
        while True:
            codes = [p.poll() for p in self.procs]
            now = time.time()
            for rank, code in enumerate(codes):
                if code not in (None, 0) and self.first_failure is None and not (self.stop_requested and code == 130):
                    self.first_failure = (now, rank, code)
                    log.error("rank %d (pid %d) %s; stopping the other ranks", rank, self.procs[rank].pid,
                              describe_exit(code))
            if all(c is not None for c in codes):
                return [int(c) for c in codes]  # type: ignore[arg-type]
            if self.first_failure is not None and now - self.first_failure[0] > GRACE_S:
                for p in self.procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(POLL_S)

    def outcome(self, codes: list[int], first_seq: int) -> int:
        """Write ``run_finished`` if rank 0 did not; return the supervisor's exit code."""
        from engine.contract.events import EventWriter, read_events

        failures = {}
        for rank in range(self.nproc):
            path = failure_file(self.run_dir, rank)
            try:
                failures[rank] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            path.unlink(missing_ok=True)
        events, _ = read_events(self.run_dir / "events.jsonl")
        finished = [e for e in events if e.get("type") == "run_finished" and e.get("seq", -1) >= first_seq]
        if finished:  # rank 0 accounted for the run: its exit code is the run's
            return codes[0]
        if all(c == 0 for c in codes):  # rank 0 ended without a word: a bug, never a silent success
            status, reason = "failed", "rank 0 exited without recording how the run ended"
        elif self.first_failure is None and self.stop_requested:
            status, reason = "stopped", "stopped by a signal; the last checkpoint is kept"
        else:
            status, reason = "failed", self.reason(codes, failures)
        writer = EventWriter(self.run_dir / "events.jsonl", self.run_dir.name)
        try:
            writer.emit("run_finished", status=status, error=reason)
        finally:
            writer.close()
        return EXIT_STOPPED if status == "stopped" else EXIT_FAILED

    def reason(self, codes: list[int], failures: dict[int, dict]) -> str:
        """The first cause: a rank's own error, else the rank that died first, else the first exit."""
        own = [f for r, f in sorted(failures.items()) if not f.get("collective")]
        if own:
            return f"rank {own[0]['rank']}: {own[0]['reason']}"
        if self.first_failure is not None:
            _, rank, code = self.first_failure
            return (f"rank {rank} (pid {self.procs[rank].pid}) {describe_exit(code)}; the other ranks were "
                    "stopped and the last checkpoint is kept")
        bad = [(r, c) for r, c in enumerate(codes) if c != 0]
        rank, code = bad[0] if bad else (0, codes[0])
        return f"rank {rank} {describe_exit(code)}"


def supervise(run_dir: Path, nproc: int) -> int:
    """Run ``run_dir`` on ``nproc`` ranks; the exit code follows DESIGN.md (0, 1, 2, 130)."""
    from engine.contract.events import EventWriter

    lock = acquire_lock(run_dir)
    if lock is None:
        print(f"{run_dir}: another engine is already running this folder", file=sys.stderr)
        return EXIT_USAGE
    sup = Supervisor(run_dir, nproc)
    signal.signal(signal.SIGTERM, sup.forward_signal)
    signal.signal(signal.SIGINT, sup.forward_signal)
    writer = EventWriter(run_dir / "events.jsonl", run_dir.name)
    first_seq = writer.seq  # what the ranks write from here on is this attempt's
    writer.close()
    try:
        sup.start()
    except ValueError as err:
        print(f"{run_dir}: {err}", file=sys.stderr)
        return EXIT_USAGE
    log.info("run %s: %d ranks started (pids %s)", run_dir.name, nproc, ", ".join(str(p.pid) for p in sup.procs))
    codes = sup.wait()
    return sup.outcome(codes, first_seq)
