"""`fairtui resume RUN`: continue a stopped, failed or lost run from its last checkpoint."""

from __future__ import annotations

from typing import Optional

import typer

from fairtui.cli.options import Detach, Gpus, Home, HomeT, Json, fail

HELP = "Continue a run from its last checkpoint (same folder, same event stream)."


def resume(
    run_ref: str = typer.Argument(..., metavar="RUN", help="run id, unique id prefix, or name"),
    gpus: Optional[str] = Gpus,
    json_out: bool = Json,
    detach: bool = Detach,
    home: HomeT = Home,
) -> None:
    from engine.contract.profile_schema import ProfileError
    from fairtui.follow import follow
    from fairtui.home import RunNotFound, find_run, resolve_home
    from fairtui.launcher import GpuChoice, start_engine

    try:
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
    proc = start_engine(run_dir, choice)
    typer.echo(f"resuming run {run_dir.name}", err=True)
    if detach:
        raise typer.Exit(0)
    raise typer.Exit(follow(run_dir, proc, json_out))
