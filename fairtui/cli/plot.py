"""`fairtui plot KIND RUN... -o FILE`: publication figures (matplotlib, the extra ``fairtui[plots]``)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairtui.cli.options import Attack, Checkpoint, Force, Home, HomeT, NPerClass, fail

HELP = ("Draw a paper figure from runs: classes (per-class bars), curves (per-class accuracy over epochs), "
        "state (a method's class-wise state), confusion (robustness confusion matrix), tradeoff (average vs "
        "worst class). PDF, SVG or PNG by the suffix of -o.")


def plot(
    kind: str = typer.Argument(..., metavar="KIND", help="classes, curves, state, confusion or tradeoff"),
    runs: List[str] = typer.Argument(None, metavar="RUN..."),
    output: Path = typer.Option(..., "-o", "--output", help="the figure file: .pdf, .svg or .png (never inside "
                                "the home; an existing file only with --force)"),
    force: bool = Force,
    attack: Optional[str] = Attack,
    checkpoint: str = Checkpoint,
    n_per_class: int = NPerClass,
    clean: bool = typer.Option(False, "--clean", help="classes: clean bars above the robust ones; "
                               "curves: clean accuracy"),
    key: Optional[str] = typer.Option(None, "--key", help="state: the method_state key (default: the first)"),
    width: Optional[float] = typer.Option(None, "--width", help="inches: 3.3 one column, 6.9 two (default "
                                          "6.9; 3.3 for confusion and tradeoff)"),
    tag: Optional[str] = typer.Option(None, "--tag", help="every completed run with this tag"),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="a sweep's completed runs (seeds as mean ± std)"),
    home: HomeT = Home,
) -> None:
    from fairtui.cli.export import collect_runs
    from fairtui.export import OutputError, write_output
    from fairtui.figures import KINDS, PlotError, figure_format, require_matplotlib
    from fairtui.home import resolve_home

    if kind not in KINDS:
        raise fail(f"unknown figure {kind!r}; choose {', '.join(KINDS)}")
    try:
        fmt = figure_format(str(output))
        require_matplotlib()
    except PlotError as err:
        raise fail(str(err)) from None
    dirs = collect_runs(home, runs, tag, sweep)
    if not dirs:
        raise fail("name the runs to draw (or --tag TAG, or --sweep ID)")
    from fairtui.figures.make import PlotRequest, render
    from fairtui.runfolder import RunView

    request = PlotRequest(kind, attack, checkpoint, n_per_class, clean, key, width)
    try:
        data = render(request, [RunView.load(d) for d in dirs], fmt)
        written = write_output(output, data, resolve_home(home), force)
    except (PlotError, OutputError) as err:
        raise fail(str(err)) from None
    typer.echo(f"wrote {written}", err=True)
