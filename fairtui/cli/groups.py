"""Options and selection shared by the commands that judge groups of runs (compare, export, plot forest): runs from
the home and from ``--results`` folders of committed run files, grouped ``--by`` a key or named ``--group``."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from fairtui.cli.options import fail

if TYPE_CHECKING:
    from fairtui.runfolder import RunView

By = typer.Option(None, "--by", help="group the selected runs by profile, name (less a trailing -s<seed>), tag "
                  "or sweep; the groups' seeds are compared")
GroupOpt = typer.Option([], "--group", help="LABEL=RUN,RUN,...: a group named by hand (repeatable)")
Results = typer.Option([], "--results", help="a folder of committed run files, <profile>/<run-id>/ with "
                       "events.jsonl, profile.toml and meta.json (repeatable; only read)")
Bases = typer.Option([], "--bases", help="a folder of runs that fine-tunes started from (method.init_from), "
                     "used only as their pairs, never as a group (repeatable)")
Baseline = typer.Option(None, "--baseline", help="with groups: the group every other is paired with, by seed")


def load_views(home: "str | None", results: list[Path], method=None, dataset=None, status=None, tag=None,
               name=None, sweep=None) -> list["RunView"]:
    """The runs ``--by`` groups: the home's (those ``ls`` lists with these filters; completed by default) and
    every run under ``results``, filtered the same way."""
    from fairtui.compare import CompareError
    from fairtui.groups import results_runs
    from fairtui.home import resolve_home, runs_dir
    from fairtui.runfolder import RunView

    views: list[RunView] = []
    home_dir = resolve_home(home)
    if (home_dir / "runs.json").exists():
        from fairtui.cli.ls import filter_docs
        from fairtui.store import RunIndex

        docs = filter_docs(RunIndex(home_dir).read(), method, dataset, status or "completed", tag, name, sweep)
        views += [RunView.load(runs_dir(home_dir) / d["run_id"]) for d in docs]
    for folder in results:
        try:
            found = [RunView.load(d) for d in results_runs(folder)]
        except CompareError as err:
            raise fail(str(err)) from None
        views += [v for v in found if _matches(v, method, dataset, status or "completed", tag, name, sweep)]
    return views


def _matches(view: "RunView", method, dataset, status, tag, name, sweep) -> bool:
    cfg = view.config
    checks = [(method, (cfg.get("method") or {}).get("name")), (dataset, (cfg.get("data") or {}).get("dataset")),
              (status, view.status()), (sweep, view.meta.get("sweep"))]
    if any(want and want != have for want, have in checks):
        return False
    if tag and tag not in (view.meta.get("tags") or []):
        return False
    return not name or fnmatch.fnmatch(view.name, name)


def resolve_any(home: "str | None", ref: str, results_views: list["RunView"]) -> "RunView":
    """RUN among the ``--results`` runs (its id, a unique id prefix, or its name), else in the home."""
    from fairtui.cli.options import resolve_run
    from fairtui.runfolder import RunView

    exact = [v for v in results_views if ref in (v.run_id, v.name)]
    prefix = [v for v in results_views if v.run_id.startswith(ref)]
    for found in (exact, prefix):
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise fail(f"{ref!r} matches {len(found)} runs of --results: "
                       + ", ".join(f"{v.name} [{v.run_id}]" for v in found[:5]))
    return RunView.load(resolve_run(home, ref))


def named_groups(home: "str | None", by: Optional[str], groups: list[str], results: list[Path], filters: dict
                 ) -> dict[str, list["RunView"]]:
    """label -> runs, from ``--by`` over the selected runs and from each ``--group LABEL=RUN,...``."""
    from fairtui.groups import BY, group_keys

    out: dict[str, list] = {}
    if by is not None:
        if by not in BY:
            raise fail(f"--by must be one of {', '.join(BY)}, got {by!r}")
        for view in load_views(home, results, **filters):
            for key in group_keys(view, by):
                out.setdefault(key, []).append(view)
        if not out:
            raise fail(f"--by {by}: no completed run to group (the home and {len(results)} --results folder(s) "
                       "were searched, with the filters given)")
    if groups:
        pool = results_pool(results)
        for spec in groups:
            label, sep, refs = spec.partition("=")
            if not sep or not label.strip() or not refs.strip():
                raise fail(f"--group {spec!r}: write it as LABEL=RUN,RUN,...")
            if label.strip() in out:
                raise fail(f"--group {label.strip()!r}: a group of that name exists already")
            out[label.strip()] = [resolve_any(home, r.strip(), pool) for r in refs.split(",") if r.strip()]
    return out


def results_pool(folders: list[Path]) -> list["RunView"]:
    """Every run of the ``--results`` folders, for a RUN named on the command line."""
    from fairtui.compare import CompareError
    from fairtui.groups import results_runs
    from fairtui.runfolder import RunView

    try:
        return [RunView.load(d) for folder in folders for d in results_runs(folder)]
    except CompareError as err:
        raise fail(str(err)) from None


def bases_views(folders: list[Path]) -> dict[str, "RunView"]:
    from fairtui.compare import CompareError
    from fairtui.groups import results_runs
    from fairtui.runfolder import RunView

    try:
        return {d.name: RunView.load(d) for folder in folders for d in results_runs(folder)}
    except CompareError as err:
        raise fail(str(err).replace("--results", "--bases")) from None
