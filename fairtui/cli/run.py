"""`fairtui run PROFILE`: validate, create the run folder, start the engine and follow it."""

from __future__ import annotations

from typing import List, Optional

import typer

from fairtui.cli.options import Detach, Gpus, Home, HomeT, Json, fail

HELP = "Start a training run from a TOML profile and follow it (Ctrl-C stops it cleanly)."


def run(
    profile: str = typer.Argument(..., help="the TOML profile, e.g. profiles/quickstart.toml"),
    set_: List[str] = typer.Option([], "--set", help="override a dotted profile key: KEY=VALUE (repeatable)"),
    name: Optional[str] = typer.Option(None, "--name", help="a name for the run (default: the profile's)"),
    tag: List[str] = typer.Option([], "--tag", help="a tag for the run (repeatable)"),
    gpus: Optional[str] = Gpus,
    json_out: bool = Json,
    detach: bool = Detach,
    home: HomeT = Home,
) -> None:
    from engine.config import load_profile, profile_warnings
    from engine.contract.profile_schema import ProfileError
    from fairtui.follow import follow
    from fairtui.home import resolve_home
    from fairtui.launcher import GpuChoice, create_run, start_engine

    from fairtui.usertext import UserTextError, check_name_and_tags

    try:
        check_name_and_tags(name, tag)
    except UserTextError as err:
        raise fail(str(err)) from None
    try:
        choice = GpuChoice.from_option(gpus)
        overrides = list(set_) + (choice.overrides() if choice else [])
        resolved = load_profile(profile, overrides)
        resolved = resolve_init_from(resolved, profile, home)
        for warning in profile_warnings(resolved):
            typer.echo(f"warning: {warning}", err=True)
        run_dir = create_run(resolve_home(home), resolved, profile, name, tag, choice)
    except ProfileError as err:
        raise fail(str(err)) from None
    proc = start_engine(run_dir, choice)
    from fairtui.store import RunIndex

    RunIndex(run_dir.parent.parent).register(run_dir)
    typer.echo(f"run {run_dir.name} started in {run_dir}", err=True)
    if detach:
        if json_out:
            import json

            typer.echo(json.dumps({"run_id": run_dir.name, "run_dir": str(run_dir), "pid": proc.pid}))
        raise typer.Exit(0)
    raise typer.Exit(follow(run_dir, proc, json_out))


def resolve_init_from(profile, path: str, home):
    """FRL's `method.init_from` may name an earlier run (id, prefix or name): record its checkpoint file,
    so the saved profile says exactly which weights the run started from."""
    import dataclasses
    from pathlib import Path

    from engine.contract.profile_schema import ProfileError
    from fairtui.home import RunNotFound, find_run, resolve_home

    ref = getattr(profile.method, "init_from", "")
    if not ref:
        return profile
    if Path(ref).expanduser().exists():
        from engine.methods.frl import resolve_init_checkpoint

        check_init_checkpoint(resolve_init_checkpoint(ref), path)
        return profile
    try:
        run_dir = find_run(resolve_home(home), ref)
    except RunNotFound as err:
        raise ProfileError(path, "method.init_from", f"no such file or run: {err}") from None
    for name in ("best.pt", "last.pt"):
        checkpoint = run_dir / "checkpoints" / name
        if checkpoint.exists():
            check_init_checkpoint(checkpoint, path)
            method = dataclasses.replace(profile.method, init_from=str(checkpoint.resolve()))
            return dataclasses.replace(profile, method=method)
    raise ProfileError(path, "method.init_from", f"run {run_dir.name} has no checkpoint yet")


def check_init_checkpoint(checkpoint, path: str) -> None:
    """The weights a run starts from load safely (weights only, nothing run) before its folder exists."""
    from engine.checkpoint import CheckpointError, load_checkpoint
    from engine.contract.profile_schema import ProfileError

    try:
        load_checkpoint(checkpoint, need=("model",))
    except CheckpointError as err:
        raise ProfileError(path, "method.init_from", str(err)) from None
