"""`fairtui plot KIND RUN... -o FILE`: publication figures (matplotlib, the extra ``fairtui[plots]``)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairtui.cli.groups import GROUP_OPTIONS, judging, with_group_options
from fairtui.cli.options import Attack, Checkpoint, Force, Home, HomeT, NPerClass, fail

HELP = ("Draw a paper figure from runs: classes (per-class bars), curves (per-class accuracy over epochs), "
        "state (a method's class-wise state), confusion (robustness confusion matrix), tradeoff (average vs "
        "worst class); forest (groups of seeds against --baseline: paired differences and their intervals, with "
        "--by or --group); or from a tuning study: study STUDY (the objective over the trials, and --key's effect). "
        "PDF, SVG or PNG by the suffix of -o.")


@with_group_options
def plot(
    kind: str = typer.Argument(..., metavar="KIND", help="classes, curves, state, confusion, tradeoff, forest or study"),
    runs: List[str] = typer.Argument(None, metavar="RUN..."),
    output: Path = typer.Option(..., "-o", "--output", help="the figure file: .pdf, .svg or .png (never inside "
                                "the home; an existing file only with --force)"),
    force: bool = Force,
    attack: Optional[str] = Attack,
    checkpoint: str = Checkpoint,
    n_per_class: int = NPerClass,
    clean: bool = typer.Option(False, "--clean", help="classes: clean bars above the robust ones; "
                               "curves: clean accuracy"),
    key: Optional[str] = typer.Option(None, "--key", help="state: the method_state key (default: the first); "
                                      "study: the parameter (default: the first)"),
    width: Optional[float] = typer.Option(None, "--width", help="inches: 3.3 one column, 6.9 two (default "
                                          "6.9; 3.3 for confusion and tradeoff)"),
    tag: Optional[str] = typer.Option(None, "--tag", help="every completed run with this tag"),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="a sweep's completed runs (seeds as mean ± std)"),
    groups: Optional[dict] = None,  # --by, --group, --results, --bases, --baseline, --against-start
    home: HomeT = Home,
) -> None:
    by, group, results, bases, baseline, against_start, allow, effect, family = (groups[k] for k, _, _ in
                                                                                        GROUP_OPTIONS)
    from fairtui.cli.groups import collect_runs
    from fairtui.judge.export import OutputError, write_output
    from fairtui.figures import KINDS, PlotError, figure_format, require_matplotlib
    from fairtui.runs.home import resolve_home

    if kind not in KINDS and kind not in ("study", "forest"):
        raise fail(f"unknown figure {kind!r}; choose {', '.join(KINDS)}, forest or study")
    try:
        fmt = figure_format(str(output))
        require_matplotlib()
    except PlotError as err:
        raise fail(str(err)) from None
    if kind == "forest":  # groups of seeds against a baseline group, paired by seed
        raise typer.Exit(_plot_forest(runs, by, group, results, bases, baseline, attack, checkpoint, n_per_class,
                                      output, fmt, width, force, home, against_start,
                                      judging(allow, effect, family)))
    if against_start:
        raise fail("--against-start belongs to plot forest (groups paired with a --baseline)")
    if kind == "study":  # a tuning study (fairtui tune): its objective over the trials, and one parameter's effect
        raise typer.Exit(_plot_study(runs, output, fmt, key, width, force, home))
    dirs = collect_runs(home, runs, tag, sweep)
    if not dirs:
        raise fail("name the runs to draw (or --tag TAG, or --sweep ID)")
    from fairtui.figures.make import PlotRequest, render
    from fairtui.runs.runfolder import RunView

    # runs named one by one are series of their own; a --tag or --sweep selection is grouped by configuration
    request = PlotRequest(kind, attack, checkpoint, n_per_class, clean, key, width,
                          by_run=bool(runs) and not tag and not sweep)
    views = [RunView.load(d) for d in dirs]
    if not request.by_run and kind in ("classes", "tradeoff"):
        from fairtui.judge.compare import seed_groups

        for _, _, aside in seed_groups(views):
            for line in aside:
                typer.echo(f"set aside (a replicate, not a seed): {line}", err=True)
    try:
        data = render(request, views, fmt)
        written = write_output(output, data, resolve_home(home), force)
    except (PlotError, OutputError) as err:
        raise fail(str(err)) from None
    typer.echo(f"wrote {written}", err=True)


def _plot_study(names: list[str] | None, output: Path, fmt: str, key: str | None, width: float | None, force: bool,
                home: HomeT) -> int:
    from fairtui.tune import study as tune
    from fairtui.judge.export import OutputError, write_output
    from fairtui.figures import PlotError, draw
    from fairtui.runs.home import resolve_home

    if not names or len(names) != 1:
        raise fail("plot study STUDY: name one study")
    try:
        study, req = tune.load(resolve_home(home), names[0], to_run=False)
        fig = draw.study(tune.summary(study, req), key, width or 6.9)
        written = write_output(output, draw.to_bytes(fig, fmt), resolve_home(home), force)
    except (tune.TuneError, PlotError, OutputError) as err:
        raise fail(str(err)) from None
    typer.echo(f"wrote {written}", err=True)
    return 0


def _plot_forest(runs, by, group, results, bases, baseline, attack, checkpoint, n_per_class, output: Path, fmt: str,
                 width, force: bool, home: HomeT, against_start: bool = False, judged: "dict | None" = None) -> int:
    from fairtui.cli.groups import bases_views, named_groups
    from fairtui.judge.compare import CompareError
    from fairtui.judge.export import OutputError, write_output
    from fairtui.figures import PlotError, draw
    from fairtui.judge.group_report import title
    from fairtui.judge.groups import compare_groups
    from fairtui.runs.home import resolve_home

    if runs:
        raise fail("plot forest draws groups: give --by or --group (and --results), not runs")
    if by is None and not group:
        raise fail("plot forest needs groups (--by profile|name|tag|sweep, or --group LABEL=RUN,...) and --baseline")
    if baseline is None:
        raise fail("plot forest needs --baseline LABEL: the group the differences are taken against")
    named, left_out = named_groups(home, by, group, results, {})
    try:
        cmp = compare_groups(named, baseline, attack, checkpoint, n_per_class, bases_views(bases), against_start,
                             **(judged or {}), left_out=left_out)
    except CompareError as err:
        raise fail(str(err)) from None
    rows = cmp.to_json()["paired"]
    if not rows:
        raise fail(f"no group could be paired with {baseline!r}: "
                   + "; ".join(f"{p.group}: {p.reason}" for p in cmp.pairings) if cmp.pairings else "no other group")
    caption = f"paired by seed against {baseline}, 95% t-intervals; {title(cmp)}"
    started = [p.group for p in cmp.pairings if p.against == "start"]
    if started:
        caption += (f"; {', '.join(started)} against the checkpoints {'its' if len(started) == 1 else 'their'} "
                    "runs started from")
    try:
        fig = draw.forest(rows, caption, width or 6.9)
        written = write_output(output, draw.to_bytes(fig, fmt), resolve_home(home), force)
    except (PlotError, OutputError) as err:
        raise fail(str(err)) from None
    for line in cmp.left_out_lines():  # the runs not drawn, and why
        typer.echo(line, err=True)
    typer.echo(f"wrote {written}", err=True)
    return 0
