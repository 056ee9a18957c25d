"""The Slurm launcher, through submitit: a sweep becomes one job array with a concurrency cap, and
``fairtui run --launcher slurm`` one job.

A run on one node is one task: the engine on the task's GPUs (several: DDP, its ranks started by
torch's launcher inside the task). A run on N nodes is N tasks, one per node, and each starts the
engine under ``torchrun`` (:func:`node_command`, the command the README gives for several nodes
outside Slurm) with a c10d rendezvous on the first node of the allocation (submitit's
``TorchDistributedEnvironment``: its host, and a port drawn from the job id). Rank 0, wherever it
lands, writes the run folder, which every node must see.

On preemption or time-out, submitit calls :meth:`TrainRun.checkpoint` in the first task: the engine
is asked to stop (SIGTERM: every rank finishes the same batch, the last checkpoint is kept) and the
job is requeued; the engine then resumes from that checkpoint. Slurm's warning signal (SIGUSR2,
which submitit asks for) reaches every process of the job, so the engine and torchrun are started
with it ignored: the task alone acts on it.
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
from typing import Any

from engine.contract.profile_schema import ProfileError
from engine.contract.storage import local_filesystem
from engine.contract.protocol import engine_args
from fairtui.launch.sbatch_options import OWNED_SBATCH, SBATCH_KEY, check_sbatch_value

# the command-line option of each setting (the profile's [sweep.slurm] table uses the setting's name)
OPTIONS = {"nodes": "--nodes", "gpus_per_node": "--gpus-per-node", "gpus_per_task": "--gpus-per-task",
           "partition": "--partition", "time_min": "--time", "cpus": "--cpus", "mem_gb": "--mem-gb",
           "parallelism": "--array-parallelism", "sbatch": "--sbatch", "cluster": "--cluster"}



def given_options(**values) -> list[str]:
    """The options among ``values`` that were given on the command line (not None, not empty)."""
    return [OPTIONS[k] for k, v in values.items() if v not in (None, [])]


@dataclass
class SlurmSettings:
    partition: str | None = None
    time_min: int = 60 * 24
    gpus_per_node: int = 1
    nodes: int = 1
    cpus: int = 8
    mem_gb: int | None = None
    parallelism: int = 16
    sbatch: dict[str, str] = field(default_factory=dict)
    cluster: str = "slurm"  # submitit's "local" / "debug" executors run the same code on this machine

    KNOWN = ("partition", "time_min", "gpus_per_node", "gpus_per_task", "nodes", "cpus", "mem_gb", "parallelism",
             "sbatch", "cluster")

    @classmethod
    def from_sources(cls, table: dict, **cli) -> "SlurmSettings":
        """The profile's ``[sweep.slurm]`` table (``table``), then the command line's options (``cli``).
        ``gpus_per_task`` is the older name of ``gpus_per_node``: one task runs on each node."""
        for key in table:
            if key not in cls.KNOWN:
                raise ProfileError("profile", f"sweep.slurm.{key}", f"unknown key (known: {', '.join(sorted(cls.KNOWN))})")
        values = {k: v for k, v in table.items() if k != "sbatch"}
        if "gpus_per_task" in values:
            older = values.pop("gpus_per_task")
            values.setdefault("gpus_per_node", older)
        table_sbatch = table.get("sbatch", {})
        if not isinstance(table_sbatch, dict):
            raise ProfileError("profile", "sweep.slurm.sbatch", "expected a table of sbatch options (KEY = VALUE)")
        sbatch = {key: ("sweep.slurm.sbatch", value) for key, value in table_sbatch.items()}
        for item in cli.pop("sbatch", []) or []:
            if "=" not in item:
                raise ProfileError("--sbatch", repr(item), "expected KEY=VALUE, e.g. account=myproject")
            key, value = item.split("=", 1)
            sbatch[key.strip()] = ("--sbatch", value.strip())
        for key, (where, value) in list(sbatch.items()):
            if not SBATCH_KEY.match(key):
                raise ProfileError(where, repr(key), "is not an sbatch option name (letters, digits, '_', '-')")
            if key.replace("_", "-") in OWNED_SBATCH or key in OWNED_SBATCH:
                instead = OWNED_SBATCH.get(key.replace("_", "-"), OWNED_SBATCH.get(key))
                raise ProfileError(where, key, "fairtui sets it itself: " + (
                    f"give {instead} instead" if instead else "the job's output, error, array, job-name, signal and "
                    "open-mode are fairtui's (its log is the run folder's slurm/ files; a requeue needs its signal)"))
            sbatch[key] = check_sbatch_value(f"{where}.{key}" if where.startswith("sweep") else where, key, value)
        values.update({k: v for k, v in cli.items() if v is not None})
        settings = cls(**values, sbatch=sbatch)
        for key in ("partition", "cluster"):
            value = getattr(settings, key)
            if value is not None:
                check_sbatch_value(OPTIONS[key] if key in cli and cli[key] is not None else f"sweep.slurm.{key}",
                                   key, value)
        for key in ("nodes", "gpus_per_node", "time_min", "cpus", "parallelism", "mem_gb"):
            value = getattr(settings, key)
            if key == "mem_gb" and value is None:
                continue
            least = 0 if key == "gpus_per_node" else 1  # 0 GPUs: a CPU job, for clusters (or partitions) without
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ProfileError(OPTIONS[key], str(value), f"must be a whole number, {least} or more")
        if settings.cluster not in ("slurm", "local", "debug"):
            raise ProfileError("--cluster", settings.cluster, "choose slurm, or local / debug (submitit's "
                               "executors that run the job's tasks on this machine)")
        return settings  # no partition: the cluster's default, as sbatch takes it (the run's meta says which)

    def require_cluster(self) -> "SlurmSettings":
        """Refuse, before anything exists, a launch to a cluster this machine cannot reach: submitit submits
        with sbatch and its jobs start with srun, so a machine with neither on PATH is not a Slurm login node."""
        import shutil

        if self.cluster == "slurm" and not (shutil.which("srun") and shutil.which("sbatch")):
            missing = " and ".join(c for c in ("sbatch", "srun") if not shutil.which(c))
            raise ProfileError("--launcher", "slurm", f"no {missing} on PATH: this machine is not a Slurm login node "
                               "(--cluster local runs the job's tasks here, to try a launch)")
        return self

    def describe(self) -> str:
        gpus = f"{self.gpus_per_node} GPU{'s' if self.gpus_per_node > 1 else ''}" if self.gpus_per_node else \
            f"{self.cpus} CPUs, no GPU"
        return f"{self.nodes} nodes x {gpus}" if self.nodes > 1 else gpus


def shared_storage_warning(home: Path) -> str | None:
    fs = local_filesystem(home)
    if fs is None:
        return None
    return (f"the home folder {home.resolve()} is on {fs}, which looks local to this machine: the compute nodes "
            "must see the same folder (put --home on shared storage such as NFS or Lustre)")


def node_command(run_dir: Path, nproc: int, nodes: int, endpoint: str, rdzv_id: str) -> list[str]:
    """The engine on one node of an N-node run: torchrun with a c10d rendezvous, the same on every node
    (the README's command for several nodes; under Slurm each task runs it)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id, "--max-restarts", "0",
            *engine_args("train", run_dir)]


def rendezvous() -> tuple[str, str]:
    """Inside a job's task: the c10d rendezvous (HOST:PORT on the allocation's first node, and an id),
    the same in every task of the job and again after a requeue."""
    import submitit
    from submitit.helpers import TorchDistributedEnvironment

    dist = TorchDistributedEnvironment()
    return f"{dist.master_addr}:{dist.master_port}", f"fairtui-{submitit.JobEnvironment().job_id}"


def warning_signal() -> signal.Signals:
    """The signal submitit asks Slurm to send before a preemption or the time limit (SIGUSR2 unless
    SUBMITIT_PREEMPT_SIGNAL says otherwise)."""
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), signal.SIGUSR2)


def _ignore_slurm_warning() -> None:
    # in the engine and torchrun (inherited across exec): the signal's default action would kill them
    signal.signal(warning_signal(), signal.SIG_IGN)


class TrainRun:
    """The picklable task of one job (or array element): train (or resume) one run folder, on ``nodes``
    nodes (one task each) of ``nproc`` GPUs."""

    def __init__(self, run_dir: str, nproc: int = 1, nodes: int = 1):
        self.run_dir = run_dir
        # GPUs of a node: more than one trains the run with DDP, one rank per GPU of the allocation
        self.nproc = nproc
        self.nodes = nodes
        self.proc: subprocess.Popen | None = None

    def __call__(self) -> int:
        from fairtui.launch.launcher import engine_command

        run_dir = Path(self.run_dir)
        nproc, nodes = getattr(self, "nproc", 1), getattr(self, "nodes", 1)
        task = _task_index() if nodes > 1 else 0
        if task == 0:
            _record_job(run_dir, nodes)
        lock, env = None, None
        if nodes > 1:
            command = node_command(run_dir, nproc, nodes, *rendezvous())
            if task == 0:  # torchrun does not pass the lock on: rank 0 takes it when it starts
                (run_dir / "queued").unlink(missing_ok=True)
        else:  # the engine inherits engine.lock, as from the local launcher: "queued", then "running", never "lost"
            from engine.contract.protocol import LOCK_FD_ENV
            from fairtui.launch.launcher import hold_engine_lock

            command = engine_command(run_dir, nproc)
            lock = hold_engine_lock(run_dir)
            env = {**os.environ, LOCK_FD_ENV: str(lock.fileno())}
        log_path = run_dir / ("engine.log" if task == 0 else f"engine.node{task}.log")  # one writer per file
        try:
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                             pass_fds=(lock.fileno(),) if lock else (),
                                             preexec_fn=_ignore_slurm_warning)
        finally:
            if lock is not None:
                lock.close()  # the engine holds its own copy of the locked file
                (run_dir / "queued").unlink(missing_ok=True)  # only now: a reader sees queued or running
        # Poll rather than wait(): the preemption handler runs on this thread and must be able to
        # reap the engine itself (a nested Popen.wait would deadlock on Popen's wait lock).
        while (code := self.proc.poll()) is None:
            time.sleep(0.5)
        if code != 0:
            where = f"node task {task}: " if nodes > 1 else ""
            raise RuntimeError(f"{where}the engine exited with code {code}; see {log_path}")
        return code

    def checkpoint(self, *args, **kwargs):
        """Preempted or timed out (submitit calls this in the job's first task only): stop the engine
        cleanly (on several nodes, every rank stops at the same batch: the stop is agreed between the
        ranks), then requeue the job (it resumes)."""
        import submitit

        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 300
            while self.proc.poll() is None and time.time() < deadline:
                time.sleep(0.2)
            if self.proc.poll() is None:
                self.proc.kill()
        return submitit.helpers.DelayedSubmission(TrainRun(self.run_dir, getattr(self, "nproc", 1),
                                                           getattr(self, "nodes", 1)))


def _task_index() -> int:
    """This task's index in the job: its node's, one task running on each node."""
    try:
        import submitit

        return submitit.JobEnvironment().global_rank
    except Exception:  # not inside a submitit job (a direct call)
        return int(os.environ.get("SLURM_PROCID", "0") or 0)


def _record_job(run_dir: Path, nodes: int = 1) -> None:
    """The job id and node(s) into meta.json, for `ls`, `show` and the app."""
    from fairtui.launch.launcher import change_meta

    hosts = None
    try:
        import submitit

        env = submitit.JobEnvironment()
        job_id, node = env.job_id, env.hostname
        if nodes > 1:
            hosts = list(env.hostnames)
    except Exception:  # not inside a submitit job (a direct call)
        job_id, node = os.environ.get("SLURM_JOB_ID"), socket.gethostname()
    update = {"slurm_job_id": job_id, "node": node, "launcher": "slurm"}
    if nodes > 1:
        update.update({"nodes": nodes, "slurm_nodes": hosts})
    change_meta(run_dir, lambda meta: meta.update(update))


def _executor(home: Path, name: str, settings: SlurmSettings, array: bool) -> Any:
    """A submitit executor with the job's resources: ``settings.nodes`` nodes, one task on each (on
    submitit's local executor, which has one node, the tasks run side by side on this machine)."""
    try:
        import submitit
    except ImportError:
        raise ProfileError("--launcher", "slurm", "submitit is not installed: pip install 'fairtui[slurm]'") from None
    warning = shared_storage_warning(home) if settings.cluster == "slurm" else None
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    executor = submitit.AutoExecutor(folder=home / "slurm" / name, cluster=settings.cluster)
    params: dict[str, Any] = {"timeout_min": settings.time_min, "cpus_per_task": settings.cpus, "name": name}
    if settings.gpus_per_node:  # 0: a CPU job, no GPU asked for (a cluster without GPUs refuses any gres)
        params["gpus_per_node"] = settings.gpus_per_node
    if settings.cluster == "slurm":
        params.update({"nodes": settings.nodes, "tasks_per_node": 1})
    else:
        params["tasks_per_node"] = settings.nodes
    if array:
        params["slurm_array_parallelism"] = settings.parallelism
    if settings.partition:
        params["slurm_partition"] = settings.partition
    if settings.mem_gb:
        params["mem_gb"] = settings.mem_gb
    if settings.sbatch:
        params["slurm_additional_parameters"] = dict(settings.sbatch)
    executor.update_parameters(**params)
    return executor


def _submitted(home: Path, run_dir: Path, job: Any, settings: SlurmSettings) -> None:
    from fairtui.launch.launcher import change_meta
    from fairtui.runs.store import RunIndex

    update = {"slurm_job_id": str(job.job_id), "launcher": "slurm", "slurm_cluster": settings.cluster,
              "slurm_partition": settings.partition or job_partition(str(job.job_id), settings.cluster)}
    if settings.nodes > 1:
        update["nodes"] = settings.nodes
    change_meta(run_dir, lambda meta: meta.update(update))
    RunIndex(home).register(run_dir)


def job_partition(job_id: str, cluster: str) -> str | None:
    """The partition Slurm gave a job submitted without one (the cluster's default): squeue's answer, or None where
    it cannot say (the job ended already, or submitit's local executor ran it)."""
    if cluster != "slurm":
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%P"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    names = out.stdout.split()
    return names[0] if out.returncode == 0 and names else None


def submit_run(home: Path, run_dir: Path, settings: SlurmSettings) -> Any:
    """``fairtui run --launcher slurm``: one job for one run folder; return the submitit job."""
    executor = _executor(home, run_dir.name, settings, array=False)
    (run_dir / "queued").touch()
    try:
        job = executor.submit(TrainRun(str(run_dir), settings.gpus_per_node, settings.nodes))
    except Exception as err:  # sbatch refused the job: the run folder says so, and nothing waits for it
        _not_submitted(run_dir, err)
        raise ProfileError("--launcher", "slurm", f"the job was not submitted: {err}") from None
    _submitted(home, run_dir, job, settings)
    return job


def _not_submitted(run_dir: Path, err: Exception) -> None:
    """sbatch refused the job: the run is failed with the reason, recorded beside its stream (no engine ran)."""
    from engine.contract.protocol import record_end

    record_end(run_dir, "failed", f"not submitted to Slurm: {err}".splitlines()[0])
    (run_dir / "queued").unlink(missing_ok=True)


def submit_runs(home: Path, runs: list[Path], name: str, settings: SlurmSettings) -> list:
    """Submit run folders as one job array (its tasks at most ``settings.parallelism`` at once); return the submitit
    jobs. Where sbatch refuses the array, each run is failed with the scheduler's reason and ProfileError says it."""
    executor = _executor(home, name, settings, array=True)
    jobs = []
    for run_dir in runs:
        (run_dir / "queued").touch()
    try:
        with executor.batch():
            for run_dir in runs:
                jobs.append(executor.submit(TrainRun(str(run_dir), settings.gpus_per_node, settings.nodes)))
    except Exception as err:  # noqa: BLE001 (sbatch's refusal, whatever submitit raises it as)
        for run_dir in runs:
            _not_submitted(run_dir, err)
        raise ProfileError("--launcher", "slurm", f"the jobs were not submitted: {err}") from None
    for run_dir, job in zip(runs, jobs):
        _submitted(home, run_dir, job, settings)
    return jobs


def submit_sweep(home: Path, record: dict, settings: SlurmSettings) -> list:
    """Submit every child of the sweep as one job array; return the submitit jobs."""
    from fairtui.launch.sweep import save_record

    jobs = submit_runs(home, [home / "runs" / r for r in record["runs"]], record["sweep_id"], settings)
    record["jobs"] = [str(j.job_id) for j in jobs]
    save_record(home, record)
    return jobs


def cancel(run_dir: Path, graceful: bool = True) -> None:
    """scancel the run's job: ``graceful`` sends SIGTERM to all its processes (the last resort of `fairtui stop`,
    which asks the engine through the run folder first: fairtui.launch.control), else cancels it outright (a job
    that has not started)."""
    meta = json.loads((run_dir / "meta.json").read_text())
    job_id = meta.get("slurm_job_id")
    if not job_id:
        raise ProfileError(str(run_dir), "slurm_job_id", "this run has no Slurm job id")
    command = ["scancel", "--signal=TERM", "--full", str(job_id)] if graceful else ["scancel", str(job_id)]
    subprocess.run(command, check=True, timeout=60)
