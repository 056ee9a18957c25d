"""`fairtui sweep PROFILE --grid KEY=V1,V2 --seeds N`: a grid of runs on local GPUs or on Slurm."""

from __future__ import annotations

from typing import List, Optional

import typer

from fairtui.cli.launching import child_line, cpu_slots_line, sweep_bars
from fairtui.cli.options import (Cluster, Cpus, Detach, GpusPerNode, Home, HomeT, Json, Launcher, MemGb, Nodes,
                                  Partition, Sbatch, TimeMin, fail)

HELP = ("Run the cross product of grids over profile keys and seeds, each child a normal run, on the local "
        "GPU queue or as a Slurm job array.")


def sweep(
    profile: str = typer.Argument(..., help="a TOML profile (its [sweep] table, if any, is used)"),
    grid: List[str] = typer.Option([], "--grid", help="KEY=V1,V2,... (repeatable)"),
    seeds: Optional[int] = typer.Option(None, "--seeds", min=1, help="seeds 0..N-1"),
    seed_list: Optional[str] = typer.Option(None, "--seed-list", help="explicit seeds, e.g. 0,1,7"),
    set_: List[str] = typer.Option([], "--set", help="override a profile key for every child"),
    name: Optional[str] = typer.Option(None, "--name", help="base name of the children"),
    launcher: Optional[str] = Launcher,
    gpus: Optional[str] = typer.Option(None, "--gpus", help="local: the GPUs to spread over, or cpu"),
    per_gpu: Optional[int] = typer.Option(None, "--per-gpu", min=1, help="local: runs at once on each GPU, for "
                                          "every worker of the home (stored with its queue)"),
    nodes: Optional[int] = Nodes,
    gpus_per_node: Optional[int] = GpusPerNode,
    gpus_per_task: Optional[int] = typer.Option(None, "--gpus-per-task", hidden=True),  # the older name
    partition: Optional[str] = Partition,
    time_min: Optional[int] = TimeMin,
    cpus: Optional[int] = Cpus,
    mem_gb: Optional[int] = MemGb,
    parallelism: Optional[int] = typer.Option(None, "--array-parallelism", help="slurm: children at once"),
    sbatch: List[str] = Sbatch,
    cluster: Optional[str] = Cluster,
    detach: bool = Detach,
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json

    from engine.contract.config import pinned_form_keys, profile_warnings
    from engine.contract.profile_io import apply_overrides
    from engine.contract.profile_schema import ProfileError
    from fairtui.runs.home import resolve_home
    from fairtui.launch.queue import pool_of
    from fairtui.launch.sweep import build_spec, expand, split_profile
    from fairtui.launch.sweep_run import create_children

    from fairtui.runs.usertext import UserTextError, check_name

    try:
        if name is not None:
            check_name(name)
    except UserTextError as err:
        raise fail(str(err)) from None
    home_dir = resolve_home(home)
    try:
        written, table = split_profile(profile)
        raw = apply_overrides(written, list(set_))
        chosen = [int(s) for s in seed_list.split(",")] if seed_list else None
        spec = build_spec(profile, table, grid, seeds, chosen, launcher)
        one_thread = spec.launcher == "local" and pool_of(gpus) == ["cpu"] \
            and "threads" not in (raw.get("train") or {}) \
            and "threads" not in spec.grid and "train.threads" not in spec.grid
        if one_thread:  # the CPU's slots: one-thread children side by side (fairtui.launch.queue)
            raw = apply_overrides(raw, ["train.threads=1"])
        children = expand(profile, raw, spec)
        pinned = [w for child, _ in children for w in pinned_form_keys(apply_overrides(raw, child.overrides),
                                                                         str(profile), written)]
        for warning in dict.fromkeys(pinned + [w for _, resolved in children for w in profile_warnings(resolved)]):
            typer.echo(f"warning: {warning}", err=True)
        slurm_settings = None
        if spec.launcher == "slurm":
            from fairtui.launch.slurm import SlurmSettings

            slurm_settings = SlurmSettings.from_sources(
                spec.slurm, partition=partition, time_min=time_min, nodes=nodes,
                gpus_per_node=gpus_per_node if gpus_per_node is not None else gpus_per_task, cpus=cpus,
                mem_gb=mem_gb, parallelism=parallelism, sbatch=sbatch, cluster=cluster).require_cluster()
        else:
            from fairtui.cli.launching import refuse_slurm_options

            refuse_slurm_options(nodes=nodes, gpus_per_node=gpus_per_node, gpus_per_task=gpus_per_task,
                                 partition=partition, time_min=time_min, cpus=cpus, mem_gb=mem_gb,
                                 parallelism=parallelism, sbatch=sbatch, cluster=cluster)
    except ValueError as err:  # ProfileError and bad --seed-list values
        raise fail(str(err)) from None
    record = create_children(home_dir, profile, children, spec, name, spec.launcher)
    from fairtui.runs.usertext import count

    typer.echo(f"sweep {record['sweep_id']}: {count(len(record['runs']), 'run')} ({spec.launcher})", err=True)
    if one_thread:
        typer.echo(cpu_slots_line(), err=True)
    if spec.launcher == "slurm":
        from fairtui.launch.slurm import submit_sweep

        try:
            submit_sweep(home_dir, record, slurm_settings)
        except ProfileError as err:
            raise fail(str(err)) from None
        if json_out:
            typer.echo(json.dumps({"sweep_id": record["sweep_id"], "runs": record["runs"]}))
        raise typer.Exit(0)
    limit = per_gpu if per_gpu is not None else table.get("per_gpu")
    if limit is not None:  # given here or in the profile's [sweep] table: the home's limit from now on
        from fairtui.launch.queue import set_home_limit

        set_home_limit(home_dir, int(limit))
    raise typer.Exit(_run_local(home_dir, record, gpus, None, detach,
                                json_out))


def _run_local(home_dir, record: dict, gpus: Optional[str], per_gpu: Optional[int], detach: bool,
               json_out: bool) -> int:
    import json

    from fairtui.launch.sweep_run import queue_locally, stop_children, wait_local

    from fairtui.launch.queue import pool_of

    pool = pool_of(gpus)
    queue = queue_locally(home_dir, record, pool, per_gpu)  # with the detached worker: it outlives us
    if detach:
        if json_out:
            typer.echo(json.dumps({"sweep_id": record["sweep_id"], "runs": record["runs"]}))
        return 0
    from rich.console import Console

    err = Console(stderr=True)
    bar = sweep_bars(err)
    task = bar.add_task(f"sweep {record['sweep_id']}", total=len(record["runs"]))
    child_task = bar.add_task("", total=None, visible=False)

    def show(now: dict[str, str]) -> None:
        done = sum(s in ("completed", "failed", "stopped", "lost") for s in now.values())
        running = [r for r, s in now.items() if s == "running"]
        bar.update(task, completed=done, description=f"sweep {record['sweep_id']} ({len(running)} running)")
        line = child_line(home_dir, running)
        bar.update(child_task, description=line, visible=bool(line))

    try:
        with bar:
            final = wait_local(home_dir, record, queue, show)
    except KeyboardInterrupt:
        stop_children(home_dir, record)
        err.print("stopped: queued children cancelled, running ones stop after their batch")
        return 130
    failed = [r for r, s in final.items() if s != "completed"]
    if json_out:
        typer.echo(json.dumps({"sweep_id": record["sweep_id"], "runs": record["runs"], "statuses": final}))
    else:
        from fairtui.judge.compare import CompareError, export_rows
        from fairtui.judge.export import terminal_table
        from fairtui.runs.runfolder import RunView

        try:
            views = [RunView.load(home_dir / "runs" / r) for r in record["runs"] if final[r] == "completed"]
            Console().print(terminal_table(export_rows(views, None, "best"), "best"))
            # whole on one line at 80 columns (the other formats: latex, csv, json)
            err.print(f"as a paper table: fairtui export --sweep {record['sweep_id']} --format md", soft_wrap=True)
        except CompareError as e:
            err.print(str(e))
    for run_id in failed:
        err.print(f"run {run_id}: {final[run_id]}")
    return 0 if not failed else 1


def queue_worker(per_gpu: Optional[int] = typer.Option(None, "--per-gpu", min=1), home: HomeT = Home) -> None:
    """The detached queue worker: start queued runs as their devices free, exit when the queue is empty."""
    from fairtui.runs.home import resolve_home
    from fairtui.launch.queue import run_worker

    raise typer.Exit(run_worker(resolve_home(home), per_gpu))
