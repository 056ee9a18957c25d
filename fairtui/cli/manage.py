"""`fairtui stop | rm | reindex | tag | note`: managing runs and the index."""

from __future__ import annotations

from typing import List

import typer

from fairtui.cli.options import Home, HomeT, Json, fail, resolve_run
from fairtui.runs.usertext import inert

STOP_HELP = "Stop a running run cleanly (it finishes its batch and keeps its last checkpoint)."
RM_HELP = "Delete a run's folder and its index entry."
REINDEX_HELP = "Rebuild the index (runs.json) from the run folders."
TAG_HELP = "Add tags to a run (--remove to take them off)."
NOTE_HELP = "Set a run's note."


def stop(run_ref: str = typer.Argument(..., metavar="RUN"), home: HomeT = Home,
         wait: bool = typer.Option(True, "--wait/--no-wait", help="wait until the engine has stopped"),
         now: bool = typer.Option(False, "--now", help="kill the engine's processes (SIGKILL) at once: for an "
                                  "engine that hangs; the run keeps its last checkpoint. A second stop of a run "
                                  "asked to stop already does the same"),
         json_out: bool = Json) -> None:
    from fairtui.launch.control import StopError, kill_run, stop_requested, stop_run

    run_dir = resolve_run(home, run_ref)
    try:
        if now or stop_requested(run_dir):
            why = "--now" if now else "it was asked to stop before and still runs"
            typer.echo(f"run {run_dir.name}: killing its engine (SIGKILL, {why}); it keeps its last checkpoint "
                       "and `fairtui resume` continues from it", err=True)
            status = kill_run(run_dir)
        else:
            status = stop_run(run_dir, wait=wait)
    except StopError as err:
        raise fail(str(err)) from None
    typer.echo(f"run {run_dir.name}: {status}", err=True)
    _json(json_out, {"run_id": run_dir.name, "status": status})


def _json(json_out: bool, doc: dict) -> None:
    """With --json, the command's one JSON document on stdout (its words stay on stderr)."""
    if json_out:
        import json

        typer.echo(json.dumps(doc))


def rm(run_ref: str = typer.Argument(..., metavar="RUN"), yes: bool = typer.Option(False, "--yes", "-y"),
       force: bool = typer.Option(False, "--force", help="delete a run that live runs or a study fine-tune from"),
       home: HomeT = Home, json_out: bool = Json) -> None:
    from fairtui.launch.control import ControlError, check_deletable, delete_run, dependents
    from fairtui.runs.runfolder import RunView

    run_dir = resolve_run(home, run_ref, unique_name=True)  # a deletion is not undone: never guess between runs
    view = RunView.load(run_dir)
    try:
        check_deletable(run_dir)  # before asking: a refusal after a yes would waste it
    except ControlError as err:
        raise fail(str(err)) from None
    needed = dependents(run_dir)
    if needed and not force:
        raise fail(f"run {inert(view.name)} [{run_dir.name}] is the start of: {'; '.join(inert(n) for n in needed)}. "
                   "Deleting it would fail them; --force deletes it anyway")
    if not yes:
        if not typer.confirm(f"delete run {inert(view.name)} [{run_dir.name}] and its folder {run_dir}?", err=True):
            raise typer.Exit(1)
    try:
        said = delete_run(run_dir)
    except ControlError as err:
        raise fail(str(err)) from None
    typer.echo(said, err=True)
    _json(json_out, {"run_id": run_dir.name, "name": view.name, "deleted": True})


def reindex(home: HomeT = Home, json_out: bool = Json) -> None:
    from fairtui.runs.home import resolve_home
    from fairtui.runs.store import RunIndex

    count, dropped = RunIndex(resolve_home(home)).reindex()
    typer.echo(f"indexed {count} run{'s' if count != 1 else ''}"
               + (f"; dropped {dropped} entries without a folder" if dropped else ""), err=True)
    _json(json_out, {"indexed": count, "dropped": dropped})


def tag(run_ref: str = typer.Argument(..., metavar="RUN"), tags: List[str] = typer.Argument(...),
        remove: bool = typer.Option(False, "--remove"), home: HomeT = Home, json_out: bool = Json) -> None:
    from fairtui.launch.control import update_meta
    from fairtui.runs.usertext import UserTextError, check_tag

    try:
        for t in tags:
            check_tag(t)
    except UserTextError as err:
        raise fail(str(err)) from None
    run_dir = resolve_run(home, run_ref)

    def change(meta: dict) -> None:
        current = [t for t in meta.get("tags", []) if not (remove and t in tags)]
        meta["tags"] = current + ([] if remove else [t for t in tags if t not in current])

    meta = update_meta(run_dir, change)
    typer.echo(f"run {inert(meta.get('name') or run_dir.name)} [{run_dir.name}]: tags "
               f"{inert(', '.join(meta['tags'])) or '(none)'}", err=True)
    _json(json_out, {"run_id": run_dir.name, "name": meta.get("name"), "tags": meta["tags"]})


def note(run_ref: str = typer.Argument(..., metavar="RUN"), text: str = typer.Argument(...),
         home: HomeT = Home, json_out: bool = Json) -> None:
    from fairtui.launch.control import update_meta

    from fairtui.runs.usertext import UserTextError, check_note

    try:
        check_note(text)
    except UserTextError as err:
        raise fail(str(err)) from None
    run_dir = resolve_run(home, run_ref)
    meta = update_meta(run_dir, lambda meta: meta.__setitem__("notes", text))
    lines = text.count("\n") + 1 if text else 0
    name = inert(meta.get("name") or run_dir.name)
    typer.echo(f"run {name} [{run_dir.name}]: note saved ({len(text)} characters"
               f"{f', {lines} lines' if lines > 1 else ''})" if text else
               f"run {name} [{run_dir.name}]: note cleared", err=True)
    _json(json_out, {"run_id": run_dir.name, "name": meta.get("name"), "notes": meta.get("notes", "")})
