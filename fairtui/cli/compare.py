"""`fairtui compare RUN RUN...`: per class side by side, summaries, deltas and rho, the config diff.

`fairtui compare --by profile|name|tag|sweep` or `--group LABEL=RUN,...`: groups of seeds, each with its mean and
95% t-interval, and with `--baseline LABEL` each paired with the baseline by seed (fairtui.judge.groups)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairtui.cli.groups import AgainstStart, AllowProtocol, Bases, By, Effect, Family, GroupOpt, Results, judging
from fairtui.cli.options import Home, HomeT, Json, fail

HELP = ("Compare 2 to 20 runs per class under one attack, with deltas and rho against a baseline; or groups of "
        "seeds (--by, --group), paired by seed with a baseline group: intervals, p-values, a verdict and the "
        "planning numbers.")


def compare(
    runs: List[str] = typer.Argument(None, metavar="RUN RUN..."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="the run deltas are taken against "
                                           "(default: the first); with groups, the baseline group's label"),
    by: Optional[str] = By,
    group: List[str] = GroupOpt,
    results: List[Path] = Results,
    bases: List[Path] = Bases,
    against_start: bool = AgainstStart,
    allow_protocol_difference: bool = AllowProtocol,
    effect: float = Effect,
    family: str = Family,
    method: Optional[str] = typer.Option(None, "--method", help="with --by: only runs of this method"),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="with --by: only runs on this data set"),
    status: Optional[str] = typer.Option(None, "--status", help="with --by: runs of this status (default "
                                         "completed)"),
    tag: Optional[str] = typer.Option(None, "--tag", help="with --by: only runs with this tag"),
    name: Optional[str] = typer.Option(None, "--name", help="with --by: run names matching this glob"),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="with --by: only the runs of this sweep"),
    attack: Optional[str] = typer.Option(None, "--attack", help="default: each run's first robust attack"),
    checkpoint: Optional[str] = typer.Option(None, "--checkpoint", help="the checkpoint every run is read at "
                                             "(default: best; with --tui, each run's headline one, its profile's first "
                                             "of eval.checkpoints)"),
    n_per_class: int = typer.Option(0, "--n-per-class", min=0, help="the results on N test images per class "
                                    "(fairtui eval --n-per-class N); default: the whole split"),
    tui: bool = typer.Option(False, "--tui", help="open the comparison in the terminal app"),
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json

    from fairtui.judge.compare import CompareError, compare as do_compare

    if by is not None or group:
        if runs:
            raise fail("give either runs, or groups (--by, --group), not both")
        filters = dict(method=method, dataset=dataset, status=status, tag=tag, name=name, sweep=sweep)
        if tui:  # the compare screen in its groups view, the committed runs of --results beside the home's
            from fairtui.app import run_app
            from fairtui.cli.groups import named_groups

            ids = [v.run_id for views in named_groups(home, by, group, results, filters)[0].values() for v in views]
            run_app(home=home, compare=list(dict.fromkeys(ids)), results=[str(r) for r in results],
                    compare_groups=True, compare_options={"baseline_label": baseline, "checkpoint": checkpoint,
                                                          "attack": attack})
            return
        raise typer.Exit(compare_groups_command(home, by, group, results, bases, baseline, attack, checkpoint or "best",
                                                n_per_class, filters, json_out, against_start,
                                                judging(allow_protocol_difference, effect, family)))
    if against_start:
        raise fail("--against-start pairs groups: give --by or --group with --baseline")
    runs = runs or []
    if not 2 <= len(runs) <= 20:
        raise fail(f"compare takes 2 to 20 runs, got {len(runs)}")
    from fairtui.cli.groups import resolve_any, results_pool

    pool = results_pool(results) if results else []  # committed runs are named as the home's are
    views = [resolve_any(home, r, pool) for r in runs]
    base_index = 0
    if baseline is not None:
        base = resolve_any(home, baseline, pool)
        if base.run_id not in [v.run_id for v in views]:
            views.insert(0, base)
        base_index = [v.run_id for v in views].index(base.run_id)
    if tui:
        from fairtui.app import run_app

        ordered = [views[base_index], *views[:base_index], *views[base_index + 1:]]  # the baseline first
        run_app(home=home, compare=[v.run_id for v in ordered], results=[str(r) for r in results])
        return
    from fairtui.runs.provenance import provenance_warnings

    for line in provenance_warnings(views):
        typer.echo(f"warning: {line}", err=True)
    try:
        result = do_compare(views, attack, checkpoint or "best", base_index, n_per_class)
    except CompareError as err:
        raise fail(str(err)) from None
    if json_out:
        typer.echo(json.dumps(result.to_json()))
        return
    from rich.console import Console

    from fairtui.judge.tables import comparison_tables

    console = Console()
    for table in comparison_tables(result):
        console.print(table)


def compare_groups_command(home, by, group, results, bases, baseline, attack, checkpoint, n_per_class, filters,
                           json_out, against_start=False, judged: "dict | None" = None) -> int:
    """Groups of seeds, and each against the baseline group, paired by seed: print and return the exit code."""
    import json

    from fairtui.cli.groups import bases_views, named_groups
    from fairtui.judge.compare import CompareError
    from fairtui.judge.groups import compare_groups

    named, left_out = named_groups(home, by, group, results, filters)
    from fairtui.runs.provenance import provenance_warnings

    # --by profile alone: the groups are the configurations (fairtui.runs.configurations), not to be worked out again
    configurations = list(named.items()) if by == "profile" and not group else None
    for line in provenance_warnings([v for views in named.values() for v in views], configurations):
        typer.echo(f"warning: {line}", err=True)
    try:
        cmp = compare_groups(named, baseline, attack, checkpoint, n_per_class, bases_views(bases), against_start,
                             **(judged or {}), left_out=left_out)
    except CompareError as err:
        raise fail(str(err)) from None
    if json_out:
        typer.echo(json.dumps(cmp.to_json()))
        return 0
    from rich.console import Console

    from fairtui.judge.group_report import terminal

    console = Console(width=min(Console().width, 80))
    for part in terminal(cmp):
        console.print(part)
    return 0
