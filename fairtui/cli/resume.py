"""`fairtui resume RUN`: continue a stopped, failed or lost run from its last checkpoint."""

from __future__ import annotations

from typing import List, Optional

import typer

from fairtui.cli.options import (Cluster, Cpus, Detach, Gpus, GpusPerNode, Home, HomeT, Json, Launcher, MemGb, Nodes,
                                  Partition, Sbatch, TimeMin, fail)

HELP = "Continue a run from its last checkpoint (same folder, same event stream)."


def resume(
    run_ref: str = typer.Argument(..., metavar="RUN", help="run id, unique id prefix, or name"),
    gpus: Optional[str] = Gpus,
    json_out: bool = Json,
    detach: bool = Detach,
    launcher: Optional[str] = Launcher,
    nodes: Optional[int] = Nodes,
    gpus_per_node: Optional[int] = GpusPerNode,
    partition: Optional[str] = Partition,
    time_min: Optional[int] = TimeMin,
    cpus: Optional[int] = Cpus,
    mem_gb: Optional[int] = MemGb,
    sbatch: List[str] = Sbatch,
    cluster: Optional[str] = Cluster,
    home: HomeT = Home,
) -> None:
    from engine.contract.profile_schema import ProfileError
    from fairtui.follow import follow
    from fairtui.home import RunNotFound, find_run, resolve_home
    from fairtui.launcher import GpuChoice, start_engine

    from fairtui.cli.run import slurm_settings, submit

    try:
        settings = slurm_settings(launcher, gpus, nodes=nodes, gpus_per_node=gpus_per_node, partition=partition,
                                  time_min=time_min, cpus=cpus, mem_gb=mem_gb, sbatch=sbatch, cluster=cluster)
        run_dir = find_run(resolve_home(home), run_ref)
        choice = GpuChoice.from_option(gpus)
    except (RunNotFound, ProfileError) as err:
        raise fail(str(err)) from None
    from fairtui.control import ControlError, NothingToDo, check_resumable

    try:
        check_resumable(run_dir)
    except NothingToDo as done:
        raise fail(str(done), 0) from None
    except ControlError as err:
        raise fail(str(err)) from None
    if settings is not None:
        raise typer.Exit(submit(run_dir, settings, json_out, verb="resubmitted"))
    proc = start_engine(run_dir, choice)
    typer.echo(f"resuming run {run_dir.name}", err=True)
    if detach:
        raise typer.Exit(0)
    raise typer.Exit(follow(run_dir, proc, json_out))
