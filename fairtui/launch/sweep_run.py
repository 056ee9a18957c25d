"""Launching a sweep's children locally (the per-GPU queue) or on Slurm, and waiting for them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from fairtui.launch.launcher import create_run
from fairtui.launch.queue import LocalQueue
from fairtui.runs.runfolder import FINAL_STATUSES, RunView
from fairtui.runs.store import RunIndex
from fairtui.launch.sweep import Child, SweepSpec, new_sweep_id, save_record


def child_name(base: str, child: Child) -> str:
    parts = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in child.values.items() if k != "seed"]
    return "-".join([base, *parts, f"s{child.values['seed']}"])


def create_children(home: Path, profile_path: str, children: list, spec: SweepSpec, name: str | None,
                    launcher: str) -> dict:
    """Make every child's run folder and the sweep's record; return the record."""
    sweep_id = new_sweep_id()
    index = RunIndex(home)
    run_ids = []
    for child, profile in children:
        run_dir = create_run(home, profile, profile_path, child_name(name or profile.name, child),
                             child.tags(sweep_id), None,
                             extra_meta={"sweep": sweep_id, "grid": child.values, "launcher": launcher})
        (run_dir / "queued").touch()
        index.register(run_dir)
        run_ids.append(run_dir.name)
    record = {"sweep_id": sweep_id, "profile": profile_path, "name": name, "grid": spec.grid,
              "seeds": spec.seeds, "launcher": launcher, "runs": run_ids, "created": time.time()}
    save_record(home, record)
    return record


def queue_locally(home: Path, record: dict, pool: list[str], per_gpu: int | None = None, worker: bool = True) -> LocalQueue:
    queue = LocalQueue(home, per_gpu=per_gpu, worker=worker)
    for run_id in record["runs"]:
        queue.submit(home / "runs" / run_id, None, pool=pool)
    return queue


def statuses(home: Path, run_ids: list[str]) -> dict[str, str]:
    return {r: RunView.load(home / "runs" / r).status() for r in run_ids}


def wait_local(home: Path, record: dict, queue: LocalQueue, on_tick: Callable[[dict[str, str]], None],
               interval: float = 1.0) -> dict[str, str]:
    """Start queued children as devices free up until every child has finished."""
    while True:
        queue.tick()
        now = statuses(home, record["runs"])
        on_tick(now)
        if all(s in FINAL_STATUSES or s == "lost" for s in now.values()):
            RunIndex(home).read()  # reconcile the index with the final statuses
            for run_id in record["runs"]:
                RunIndex(home).register(home / "runs" / run_id)
            return now
        time.sleep(interval)


def stop_children(home: Path, record: dict) -> None:
    """Ctrl-C on a sweep: queued children are cancelled, running ones stop cleanly."""
    from fairtui.launch.control import StopError, stop_run

    queue = LocalQueue(home)
    for run_id in record["runs"]:
        queue.cancel(run_id)
        try:
            stop_run(home / "runs" / run_id, wait=False)
        except StopError:
            pass
