"""A judgement's queue on a cluster (`fairtui judge --launcher slurm`), in the local queue's place."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from engine.contract.profile_schema import ProfileError
from fairtui.launch.slurm import SlurmSettings, submit_runs


class SlurmQueue:
    """The runs it is given are submitted at the next :meth:`tick` as one job array, at most ``--array-parallelism``
    at once, and Slurm's scheduler queues them; their states are read from their run folders, as every Slurm run's are. A submission that
    sbatch refuses fails those runs with its reason (the judgement names them) and never stops the judgement."""

    def __init__(self, home: Path, settings: SlurmSettings, name: str = "judge"):
        self.home, self.settings, self.name = home, settings, name
        self.pending: list[Path] = []

    def submit(self, run_dir: Path, choice: Any = None, pool: Any = None) -> None:
        (run_dir / "queued").touch()  # queued from now, not from the tick: a family's next member reads it so
        self.pending.append(run_dir)

    def tick(self, start: Any = None) -> list:
        runs, self.pending = self.pending, []
        if runs:
            try:
                submit_runs(self.home, runs, self.name, self.settings)
            except ProfileError as err:
                print(f"warning: {err}", file=sys.stderr)
        return []



def judge_queue(home: Path, settings: SlurmSettings | None, key: str) -> SlurmQueue | None:
    """`fairtui judge --launcher slurm`: its runs are Slurm jobs (their arrays named ``judge-<key>``), else None (the
    home's local queue on this machine's slots)."""
    return None if settings is None else SlurmQueue(home, settings, f"judge-{key}")
