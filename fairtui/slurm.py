"""The Slurm launcher, through submitit: a sweep becomes one job array with a concurrency cap.

Each array task runs the engine on its run folder. On preemption or time-out,
submitit calls :meth:`TrainRun.checkpoint`: the engine is asked to stop
(SIGTERM: it finishes its batch, keeps its last checkpoint) and the task is
requeued; the engine then resumes from that checkpoint. The run folders live in
the home folder, which the nodes must share.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.contract.profile_schema import ProfileError
from engine.storage import local_filesystem



@dataclass
class SlurmSettings:
    partition: str | None = None
    time_min: int = 60 * 24
    gpus_per_task: int = 1
    cpus: int = 8
    mem_gb: int | None = None
    parallelism: int = 16
    sbatch: dict[str, str] = field(default_factory=dict)
    cluster: str = "slurm"  # submitit's "local" / "debug" executors run the same code on this machine

    @classmethod
    def from_sources(cls, table: dict, **cli) -> "SlurmSettings":
        known = {"partition", "time_min", "gpus_per_task", "cpus", "mem_gb", "parallelism", "sbatch", "cluster"}
        for key in table:
            if key not in known:
                raise ProfileError("profile", f"sweep.slurm.{key}", f"unknown key (known: {', '.join(sorted(known))})")
        values = {k: v for k, v in table.items() if k != "sbatch"}
        sbatch = dict(table.get("sbatch", {}))
        for item in cli.pop("sbatch", []) or []:
            if "=" not in item:
                raise ProfileError("--sbatch", item, "expected KEY=VALUE, e.g. account=myproject")
            key, value = item.split("=", 1)
            sbatch[key.strip()] = value.strip()
        values.update({k: v for k, v in cli.items() if v is not None})
        settings = cls(**values, sbatch=sbatch)
        if settings.cluster == "slurm" and not settings.partition:
            raise ProfileError("--partition", "partition", "the slurm launcher needs a partition: --partition NAME "
                               "or partition in the profile's [sweep.slurm] table")
        return settings


def shared_storage_warning(home: Path) -> str | None:
    fs = local_filesystem(home)
    if fs is None:
        return None
    return (f"the home folder {home.resolve()} is on {fs}, which looks local to this machine: the compute nodes "
            "must see the same folder (put --home on shared storage such as NFS or Lustre)")


class TrainRun:
    """The picklable task of one array element: train (or resume) one run folder."""

    def __init__(self, run_dir: str, nproc: int = 1):
        self.run_dir = run_dir
        # GPUs of the task: more than one trains the run with DDP, one rank per GPU of the allocation
        # (the engine's supervisor inside the task, as torchrun inside the task would).
        self.nproc = nproc
        self.proc: subprocess.Popen | None = None

    def __call__(self) -> int:
        run_dir = Path(self.run_dir)
        _record_job(run_dir)
        (run_dir / "queued").unlink(missing_ok=True)
        with open(run_dir / "engine.log", "ab") as log:
            from fairtui.launcher import engine_command

            self.proc = subprocess.Popen(engine_command(run_dir, getattr(self, "nproc", 1)), stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            # Poll rather than wait(): the preemption handler runs on this thread and must be able to
            # reap the engine itself (a nested Popen.wait would deadlock on Popen's wait lock).
            while (code := self.proc.poll()) is None:
                time.sleep(0.5)
        if code != 0:
            raise RuntimeError(f"the engine exited with code {code}; see {run_dir / 'engine.log'}")
        return code

    def checkpoint(self, *args, **kwargs):
        """Preempted or timed out: stop the engine cleanly, then requeue this task (it resumes)."""
        import submitit

        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 300
            while self.proc.poll() is None and time.time() < deadline:
                time.sleep(0.2)
            if self.proc.poll() is None:
                self.proc.kill()
        return submitit.helpers.DelayedSubmission(TrainRun(self.run_dir, getattr(self, "nproc", 1)))


def _record_job(run_dir: Path) -> None:
    """The array task's job id and node into meta.json, for `ls`, `show` and the app."""
    from fairtui.launcher import change_meta

    try:
        import submitit

        env = submitit.JobEnvironment()
        job_id, node = env.job_id, env.hostname
    except Exception:  # not inside a submitit job (a direct call)
        job_id, node = os.environ.get("SLURM_JOB_ID"), socket.gethostname()
    change_meta(run_dir, lambda meta: meta.update({"slurm_job_id": job_id, "node": node, "launcher": "slurm"}))


def submit_sweep(home: Path, record: dict, settings: SlurmSettings) -> list:
    """Submit every child of the sweep as one job array; return the submitit jobs."""
    try:
        import submitit
    except ImportError:
        raise ProfileError("--launcher", "slurm", "submitit is not installed: pip install 'fairtui[slurm]'") from None
    warning = shared_storage_warning(home) if settings.cluster == "slurm" else None
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    executor = submitit.AutoExecutor(folder=home / "slurm" / record["sweep_id"], cluster=settings.cluster)
    params = {"timeout_min": settings.time_min, "gpus_per_node": settings.gpus_per_task,
              "cpus_per_task": settings.cpus, "slurm_array_parallelism": settings.parallelism,
              "name": record["sweep_id"]}
    if settings.partition:
        params["slurm_partition"] = settings.partition
    if settings.mem_gb:
        params["mem_gb"] = settings.mem_gb
    if settings.sbatch:
        params["slurm_additional_parameters"] = dict(settings.sbatch)
    executor.update_parameters(**params)
    runs = [str(home / "runs" / r) for r in record["runs"]]
    jobs = []
    with executor.batch():
        for run_dir in runs:
            jobs.append(executor.submit(TrainRun(run_dir, settings.gpus_per_task)))
    from fairtui.launcher import change_meta
    from fairtui.store import RunIndex
    from fairtui.sweep import save_record

    index = RunIndex(home)
    for run_dir, job in zip(runs, jobs):
        change_meta(Path(run_dir), lambda meta, job=job: meta.update(
            {"slurm_job_id": str(job.job_id), "launcher": "slurm", "slurm_cluster": settings.cluster}))
        index.register(Path(run_dir))
    record["jobs"] = [str(j.job_id) for j in jobs]
    save_record(home, record)
    return jobs


def cancel(run_dir: Path) -> None:
    """`fairtui stop` for a Slurm run: scancel sends SIGTERM, and the engine stops cleanly."""
    meta = json.loads((run_dir / "meta.json").read_text())
    job_id = meta.get("slurm_job_id")
    if not job_id:
        raise ProfileError(str(run_dir), "slurm_job_id", "this run has no Slurm job id")
    subprocess.run(["scancel", "--signal=TERM", "--full", str(job_id)], check=True, timeout=60)
