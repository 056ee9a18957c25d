"""`fairtui resume RUN`: continue a stopped, failed or lost run from its last checkpoint."""

from __future__ import annotations

from typing import Optional

import typer

from fairtui.cli.options import Detach, Gpus, Home, HomeT, Json, fail, resolve_run
from fairtui.cli.launching import with_slurm_options

HELP = "Continue a run from its last checkpoint (same folder, same event stream)."


@with_slurm_options
def resume(
    run_ref: str = typer.Argument(..., metavar="RUN", help="run id, unique id prefix, or name"),
    gpus: Optional[str] = Gpus,
    json_out: bool = Json,
    detach: bool = Detach,
    slurm: Optional[dict] = None,  # --launcher and the Slurm options (with_slurm_options)
    nproc: Optional[int] = typer.Option(None, "--nproc", min=1, help="continue on this many processes instead of "
                                        "the number the run trained with (its numbers then differ from an "
                                        "uninterrupted run's)"),
    home: HomeT = Home,
) -> None:
    from engine.contract.profile_schema import ProfileError
    from fairtui.launch.follow import follow
    from fairtui.runs.home import RunNotFound
    from fairtui.launch.launcher import GpuChoice, engine_command, start_engine

    from fairtui.cli.launching import slurm_settings, submit

    try:
        settings = slurm_settings(gpus=gpus, **slurm)
        run_dir = resolve_run(home, run_ref)  # a shared name: the newest, and a line says so
        choice = GpuChoice.from_option(gpus)
    except (RunNotFound, ProfileError) as err:
        raise fail(str(err)) from None
    from fairtui.launch.control import ControlError, NothingToDo, check_resumable

    try:
        check_resumable(run_dir)
    except NothingToDo as done:
        raise fail(str(done), 0) from None
    except ControlError as err:
        raise fail(str(err)) from None
    if settings is not None:
        raise typer.Exit(submit(run_dir, settings, json_out, verb="resubmitted"))
    try:
        world = resume_world_size(run_dir, choice, nproc)
    except ValueError as err:
        raise fail(str(err)) from None
    proc = start_engine(run_dir, choice, command=engine_command(run_dir, world))
    (run_dir / "queued").unlink(missing_ok=True)  # a run stranded as queued (control.stranded) starts here
    typer.echo(f"resuming run {run_dir.name}", err=True)
    if detach:
        raise typer.Exit(0)
    raise typer.Exit(follow(run_dir, proc, json_out))


def trained_world_size(run_dir) -> int:
    """The number of processes the run trained with, from its own events (the latest epoch's group, else
    the one its first session started with): meta.json does not say it for a run started by `python -m
    engine train RUN --nproc N`."""
    from fairtui.runs.runfolder import RunView

    view = RunView.load(run_dir)
    import itertools

    epochs = (view.digest.epoch(n) for n in sorted(view.digest.epochs, reverse=True))  # read from the latest
    for event in itertools.chain(epochs, [view.started or {}]):
        world = (event.get("distributed") or {}).get("world_size")
        if isinstance(world, int) and world > 0:
            return world
    return 1


def resume_world_size(run_dir, choice, nproc: int | None) -> int:
    """The processes a resume starts: the run's own world size, so that it continues exactly; fewer GPUs
    than that are refused (ValueError) unless ``--nproc`` says otherwise, which is warned of."""
    trained = trained_world_size(run_dir)
    gpus = len(choice.devices) if choice is not None and not choice.cpu else None
    if nproc is not None:
        if nproc != trained:
            typer.echo(f"warning: run {run_dir.name} trained on {trained} process{'es' if trained > 1 else ''}; "
                       f"continuing on {nproc}, its numbers will differ from an uninterrupted run's", err=True)
        if gpus is not None and gpus != nproc:
            raise ValueError(f"--nproc {nproc} with --gpus naming {gpus} GPU{'s' if gpus > 1 else ''}: one "
                             "process per GPU")
        return nproc
    if gpus is not None and gpus != trained:
        raise ValueError(f"run {run_dir.name} trained on {trained} process{'es' if trained > 1 else ''} and "
                         f"--gpus names {gpus}: give {trained} GPUs to continue it exactly, or --nproc {gpus} "
                         "to continue on fewer (its numbers then differ from an uninterrupted run's)")
    return trained
