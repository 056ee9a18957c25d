"""Options and selection shared by the commands that judge groups of runs (compare, export, plot forest): runs from
the home and from ``--results`` folders of committed run files, grouped ``--by`` a key or named ``--group``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from fairtui.cli.options import fail, option_group

if TYPE_CHECKING:
    from fairtui.runs.runfolder import RunView

By = typer.Option(None, "--by", help="group the selected runs by profile, name (less a trailing -s<seed>), tag "
                  "or sweep; the groups' seeds are compared")
GroupOpt = typer.Option([], "--group", help="LABEL=RUN,RUN,...: a group named by hand (repeatable)")
Results = typer.Option([], "--results", help="a folder of committed run files, <profile>/<run-id>/ with "
                       "events.jsonl, profile.toml and meta.json (repeatable; only read)")
Bases = typer.Option([], "--bases", help="a folder of runs that fine-tunes started from (method.init_from), "
                     "used only as their pairs, never as a group (repeatable)")
Baseline = typer.Option(None, "--baseline", help="with groups: the group every other is paired with, by seed")
AgainstStart = typer.Option(False, "--against-start", help="with --baseline: a fine-tune of the baseline (FRL, FAAL, "
                            "CSR) against the checkpoint each of its runs started from, which says what the fine-tune "
                            "added, instead of against the baseline's runs at --checkpoint")
AllowProtocol = typer.Option(False, "--allow-protocol-difference", help="pair groups trained with another budget "
                             "(epochs, lr schedule, training set, model, batch, training attack), naming each "
                             "difference in every output; groups measured differently are never paired")
Effect = typer.Option(2.0, "--effect", min=0.0, help="the difference to plan for, in points of accuracy, named in "
                      "advance: the seeds that detect it with 80% power")
Family = typer.Option("table", "--family", help="the family Holm adjusts over: table (the groups of one --results "
                      "folder are one family, the table they were committed as; a group of the home's runs is its own) "
                      "or all (every group of the command)")
# the group options that `export` and `plot` both take, declared once (options.option_group)
GROUP_OPTIONS = (("by", Optional[str], By), ("group", List[str], GroupOpt), ("results", List[Path], Results),
                 ("bases", List[Path], Bases), ("baseline", Optional[str], Baseline),
                 ("against_start", bool, AgainstStart), ("allow_protocol_difference", bool, AllowProtocol),
                 ("effect", float, Effect), ("family", str, Family))


def judging(allow_protocol_difference: bool, effect: float, family: str = "table") -> dict:
    """compare_groups' keywords from the judging options (``--effect`` in points, the statistics in fractions)."""
    if family not in ("table", "all"):
        raise fail(f"--family must be table or all, got {family!r}")
    return {"allow_protocol_difference": allow_protocol_difference, "effect": effect / 100, "family": family}
with_group_options = option_group("groups", GROUP_OPTIONS)


def load_views(home: "str | None", pool: list["RunView"], method=None, dataset=None, status=None, tag=None,
               name=None, sweep=None) -> tuple[list["RunView"], list[str]]:
    """The runs ``--by`` groups: those ``ls`` lists with these filters (completed by default), from the home's index
    and from ``pool`` (the ``--results`` runs), through the same filter; and a line for each committed run the
    other filters select that has no result to give (an empty or cut stream: :func:`unusable_reason`)."""
    from fairtui.judge.sources import unusable_reason
    from fairtui.runs.filters import filter_docs
    from fairtui.runs.home import resolve_home, runs_dir
    from fairtui.runs.runfolder import RunView

    wanted = dict(method=method, dataset=dataset, status=status or "completed", tag=tag, name=name, sweep=sweep)
    views: list[RunView] = []
    home_dir = resolve_home(home)
    if runs_dir(home_dir).is_dir():  # indexed as `ls` would: a home copied without its index is indexed now
        from fairtui.runs.store import RunIndex

        views += [RunView.load(runs_dir(home_dir) / d["run_id"]) for d in filter_docs(RunIndex(home_dir).read(), **wanted)]
    # a committed run has no index entry: the fields ls filters on, read from its folder
    docs = [{"method": (v.config.get("method") or {}).get("name"), "dataset": (v.config.get("data") or {}).get("dataset"),
             "status": v.status(), "tags": v.meta.get("tags") or [], "name": v.name, "sweep": v.meta.get("sweep"),
             "_view": v} for v in pool]
    chosen = [d["_view"] for d in filter_docs(docs, **wanted)]
    taken = {id(v) for v in chosen}
    # a committed run is there to be compared: one its filters select but its status keeps out is named
    left_out = [unusable_reason(d["_view"]) for d in filter_docs(docs, **{**wanted, "status": None})
                if id(d["_view"]) not in taken]
    return views + chosen, [line for line in left_out if line]


def resolve_any(home: "str | None", ref: str, results_views: list["RunView"]) -> "RunView":
    """RUN among the ``--results`` runs (its id, a unique id prefix, its name, or its short id), else in the
    home."""
    from fairtui.cli.options import resolve_run
    from fairtui.runs.runfolder import RunView

    exact = [v for v in results_views if ref in (v.run_id, v.name)]
    prefix = [v for v in results_views if v.run_id.startswith(ref)]
    short = [v for v in results_views if len(ref) >= 4 and v.run_id.rsplit("-", 1)[-1].startswith(ref)]
    for found in (exact, prefix, short):
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise fail(f"{ref!r} matches {len(found)} runs of --results: "
                       + ", ".join(f"{v.name} [{v.run_id}]" for v in found[:5]))
    return RunView.load(resolve_run(home, ref))


def named_groups(home: "str | None", by: Optional[str], groups: list[str], results: list[Path], filters: dict
                 ) -> tuple[dict[str, list["RunView"]], list[str]]:
    """label -> runs, from ``--by`` over the selected runs and from each ``--group LABEL=RUN,...``; and a line for
    each committed run of ``results`` left out before grouping (unreadable, cut, missing files), with its reason."""
    from fairtui.judge.sources import BY, grouped

    out: dict[str, list] = {}
    pool, left_out = results_selection(results)  # read once, for --by and --group alike
    if by is not None:
        if by not in BY:
            raise fail(f"--by must be one of {', '.join(BY)}, got {by!r}")
        views, unusable = load_views(home, pool, **filters)
        left_out += unusable
        out.update(grouped(views, by))
        if not out:
            raise fail(f"--by {by}: no completed run to group (the home and {len(results)} --results folder(s) "
                       "were searched, with the filters given)")
    if groups:
        for spec in groups:
            label, sep, refs = spec.partition("=")
            if not sep or not label.strip() or not refs.strip():
                raise fail(f"--group {spec!r}: write it as LABEL=RUN,RUN,...")
            if label.strip() in out:
                raise fail(f"--group {label.strip()!r}: a group of that name exists already")
            out[label.strip()] = [resolve_any(home, r.strip(), pool) for r in refs.split(",") if r.strip()]
    return out, [f"left out of --results: {line}" for line in left_out]


def results_pool(folders: list[Path], option: str = "--results") -> list["RunView"]:
    """Every run of these folders of committed run files (``option`` names them in a refusal)."""
    return results_selection(folders, option)[0]


def results_selection(folders: list[Path], option: str = "--results") -> tuple[list["RunView"], list[str]]:
    """Every run of these folders of committed run files, and a line for each folder holding part of a run
    (fairtui.judge.sources.results_scan); ``option`` names them in a refusal."""
    from fairtui.judge.compare import CompareError
    from fairtui.judge.sources import read_results

    try:
        return read_results(folders)
    except CompareError as err:
        raise fail(str(err).replace("--results", option)) from None


def bases_views(folders: list[Path]) -> dict[str, "RunView"]:
    """The ``--bases`` runs by id: the runs fine-tunes started from."""
    return {v.run_id: v for v in results_pool(folders, "--bases")}


def collect_runs(home: "str | None", runs: "list[str] | None", tag: "str | None", sweep: "str | None") -> list[Path]:
    """The run folders named on the command line, tagged ``tag`` (completed or imported) and of ``sweep``
    (its completed runs; the others are counted on stderr), each once, in the order given."""
    from fairtui.cli.options import resolve_run
    from fairtui.runs.runfolder import RunView

    dirs = [resolve_run(home, r) for r in runs or []]
    if tag:
        from fairtui.runs.home import resolve_home, runs_dir
        from fairtui.runs.store import RunIndex

        home_dir = resolve_home(home)
        dirs += [runs_dir(home_dir) / d["run_id"] for d in RunIndex(home_dir).read()
                 if tag in (d.get("tags") or []) and d.get("status") in ("completed", "imported")]
    if sweep:
        from engine.contract.profile_schema import ProfileError
        from fairtui.runs.home import resolve_home, runs_dir
        from fairtui.launch.sweep import load_record

        try:
            record = load_record(resolve_home(home), sweep)
        except ProfileError as err:
            raise fail(str(err)) from None
        finished = [runs_dir(resolve_home(home)) / r for r in record["runs"]
                    if RunView.load(runs_dir(resolve_home(home)) / r).status() == "completed"]
        if len(finished) < len(record["runs"]):
            typer.echo(f"{len(record['runs']) - len(finished)} of {len(record['runs'])} runs of the sweep have not "
                       "completed; exporting the rest", err=True)
        dirs += finished
    return list(dict.fromkeys(dirs))
