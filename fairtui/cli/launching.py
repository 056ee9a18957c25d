"""The Slurm launcher's side of the command line, shared by `run`, `resume` and `sweep`: the job's settings
from `--launcher` and the Slurm options, their refusal without the slurm launcher, and a run's submission."""

from __future__ import annotations

from typing import List, Optional

import typer

from fairtui.cli.options import (Cluster, Cpus, GpusPerNode, Launcher, MemGb, Nodes, Partition, Sbatch, TimeMin, fail,
                                  option_group)

# --launcher and the Slurm options of `run`, `resume` and `tune`, declared once (with_slurm_options)
SLURM_OPTIONS = (("launcher", Optional[str], Launcher), ("nodes", Optional[int], Nodes),
                 ("gpus_per_node", Optional[int], GpusPerNode), ("partition", Optional[str], Partition),
                 ("time_min", Optional[int], TimeMin), ("cpus", Optional[int], Cpus), ("mem_gb", Optional[int], MemGb),
                 ("sbatch", List[str], Sbatch), ("cluster", Optional[str], Cluster))


with_slurm_options = option_group("slurm", SLURM_OPTIONS)


def slurm_settings(launcher: Optional[str], gpus: Optional[str], **options):
    """``--launcher`` and the Slurm options of `run` and `resume`: the job's settings, or None (this
    machine). Raises ProfileError for a bad value; exits 2 for options that do not go together."""
    if launcher not in (None, "local", "slurm"):
        raise fail(f"--launcher {launcher}: choose local or slurm")
    if launcher != "slurm":
        refuse_slurm_options(**options)
        return None
    if gpus is not None:
        raise fail("--gpus picks this machine's GPUs; with --launcher slurm, ask for --gpus-per-node N")
    from fairtui.launch.slurm import SlurmSettings

    return SlurmSettings.from_sources({}, **options).require_cluster()


def refuse_slurm_options(**options) -> None:
    """Slurm's options given without the slurm launcher (run, resume, sweep): exit 2 naming them."""
    from fairtui.launch.slurm import given_options

    if given := given_options(**options):
        raise fail(f"{', '.join(given)}: only with --launcher slurm (on one machine, --gpus 0,1 trains one run on "
                   "several GPUs; several nodes outside Slurm start with torchrun, see docs/gpus.md)")


def submit(run_dir, settings, json_out: bool, verb: str = "submitted") -> int:
    """``--launcher slurm``: submit the run folder as one job and return (the job may wait in the queue
    for hours; `fairtui ls`, `show` and the app follow it from the run folder)."""
    from engine.contract.profile_schema import ProfileError
    from fairtui.launch.slurm import submit_run

    try:
        job = submit_run(run_dir.parent.parent, run_dir, settings)
    except ProfileError as err:
        raise fail(str(err)) from None
    typer.echo(f"run {run_dir.name} {verb} to Slurm as job {job.job_id} ({settings.describe()}) in {run_dir}; "
               f"follow it with `fairtui show {run_dir.name}` or the app, stop it with `fairtui stop {run_dir.name}`",
               err=True)
    if json_out:
        import json

        typer.echo(json.dumps({"run_id": run_dir.name, "run_dir": str(run_dir), "slurm_job_id": str(job.job_id)}))
    return 0


# -- local runs on the CPU's slots, and their progress (sweep and judge) ----------------------------------------

def cpu_slots_line() -> str:
    import os

    cores = os.cpu_count() or 1
    return (f"on the CPU: one thread a run, up to {cores} at once on {cores} core{'s' if cores != 1 else ''} "
            "(--set train.threads=N to change; 0: one run on every core)")


def sweep_bars(console):
    """The sweep's bar and its running child's line. The text takes the width a short bar leaves: at 80
    columns a long line is cut at its end, never squeezed to "…" with the bars pushed off the line."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Column

    return Progress(TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
                    BarColumn(bar_width=12), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                    transient=True, expand=True)


def child_line(home_dir, running: list[str]) -> str:
    """The running children's progress, the first one's, its ETA first: "  s1-lr0.1: ETA 12 s, train
    epoch 3 40% (+1 more running)"."""
    import json

    from fairtui.runs.runfolder import RunView
    from fairtui.runs.runstate import progress_brief

    if not running:
        return ""
    run_dir = home_dir / "runs" / running[0]
    try:
        p = json.loads((run_dir / "progress.json").read_text())
    except (OSError, ValueError):
        p = {}
    text = progress_brief(p) or ("training done; test evaluation" if p.get("phase") == "done" else "starting")
    more = f" (+{len(running) - 1} more running)" if len(running) > 1 else ""
    return f"  {RunView.load(run_dir).name}: {text}{more}"
