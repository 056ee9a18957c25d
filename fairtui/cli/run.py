"""`fairtui run PROFILE`: validate, create the run folder, start the engine and follow it."""

from __future__ import annotations

from typing import List, Optional

import typer

from fairtui.cli.options import Detach, Gpus, Home, HomeT, Json, fail
from fairtui.cli.launching import slurm_settings, submit, with_slurm_options

HELP = "Start a training run from a TOML profile and follow it (Ctrl-C stops it cleanly)."


@with_slurm_options
def run(
    profile: str = typer.Argument(..., help="the TOML profile, e.g. profiles/quickstart.toml"),
    set_: List[str] = typer.Option([], "--set", help="override a dotted profile key: KEY=VALUE (repeatable)"),
    name: Optional[str] = typer.Option(None, "--name", help="a name for the run (default: the profile's)"),
    tag: List[str] = typer.Option([], "--tag", help="a tag for the run (repeatable)"),
    gpus: Optional[str] = Gpus,
    json_out: bool = Json,
    detach: bool = Detach,
    slurm: Optional[dict] = None,  # --launcher and the Slurm options (with_slurm_options)
    home: HomeT = Home,
) -> None:
    from engine.contract.config import pinned_form_keys, profile_warnings
    from engine.contract.profile_io import apply_overrides, load_profile, read_toml
    from engine.contract.profile_schema import ProfileError
    from fairtui.launch.follow import follow
    from fairtui.runs.home import resolve_home
    from fairtui.launch.launcher import GpuChoice, create_run, resolve_init_from, start_engine

    from fairtui.runs.usertext import UserTextError, check_name_and_tags

    try:
        check_name_and_tags(name, tag)
    except UserTextError as err:
        raise fail(str(err)) from None
    try:
        settings = slurm_settings(gpus=gpus, **slurm)
        choice = GpuChoice.from_option(gpus)
        overrides = list(set_) + (choice.overrides() if choice else [])
        resolved = load_profile(profile, overrides)
        resolved = resolve_init_from(resolved, profile, home)  # a run's name -> its checkpoint file
        written = read_toml(profile)
        said = pinned_form_keys(apply_overrides(written, overrides), str(profile), written) \
            + profile_warnings(resolved)
        for warning in said:
            typer.echo(f"warning: {warning}", err=True)
        run_dir = create_run(resolve_home(home), resolved, profile, name, tag, choice)
    except ProfileError as err:
        raise fail(str(err)) from None
    if settings is not None:
        raise typer.Exit(submit(run_dir, settings, json_out))
    shared = cpu_shared_line(resolve_home(home), choice)
    if shared:
        typer.echo(shared, err=True)
    proc = start_engine(run_dir, choice)
    from fairtui.runs.store import RunIndex

    RunIndex(run_dir.parent.parent).register(run_dir)
    typer.echo(f"run {run_dir.name} started in {run_dir}", err=True)
    if detach:
        if json_out:
            import json

            typer.echo(json.dumps({"run_id": run_dir.name, "run_dir": str(run_dir), "pid": proc.pid}))
        raise typer.Exit(0)
    raise typer.Exit(follow(run_dir, proc, json_out, said=said))  # the engine logs them again: said once


def cpu_shared_line(home_dir, choice) -> str | None:
    """A line when this run will train on the CPU beside other running runs of the home (`fairtui run` starts at
    once, unlike the queue): how many, and the cores their threads take."""
    if choice is not None and not choice.cpu:
        return None
    if choice is None:
        from fairtui.launch.gpus import inventory

        if inventory():  # the engine's choice: a GPU
            return None
    from fairtui.launch.queue import LocalQueue

    queue = LocalQueue(home_dir)
    counts, slots = queue.usage()
    running = counts.get("cpu", 0)
    if not running:
        return None
    return (f"note: {running} other run{'s' if running > 1 else ''} of this home train{'s' if running == 1 else ''} "
            f"on the CPU, their threads on {min(slots, queue.cores)} of its {queue.cores} cores: this run shares "
            "them (fairtui sweep and judge queue runs for the free cores instead)")
