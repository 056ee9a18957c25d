"""`fairtui compare RUN RUN...`: per class side by side, summaries, deltas and rho, the config diff."""

from __future__ import annotations

from typing import List, Optional

import typer

from fairtui.cli.options import Home, HomeT, Json, fail, resolve_run

HELP = "Compare 2 to 20 runs per class under one attack, with deltas and rho against a baseline."


def compare(
    runs: List[str] = typer.Argument(..., metavar="RUN RUN..."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="the run deltas are taken against "
                                           "(default: the first)"),
    attack: Optional[str] = typer.Option(None, "--attack", help="default: each run's first robust attack"),
    checkpoint: str = typer.Option("best", "--checkpoint"),
    n_per_class: int = typer.Option(0, "--n-per-class", min=0, help="the results on N test images per class "
                                    "(fairtui eval --n-per-class N); default: the whole split"),
    tui: bool = typer.Option(False, "--tui", help="open the comparison in the terminal app"),
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json

    from fairtui.compare import CompareError, compare as do_compare
    from fairtui.runfolder import RunView

    if not 2 <= len(runs) <= 20:
        raise fail(f"compare takes 2 to 20 runs, got {len(runs)}")
    dirs = [resolve_run(home, r) for r in runs]
    base_index = 0
    if baseline is not None:
        base_dir = resolve_run(home, baseline)
        if base_dir not in dirs:
            dirs.insert(0, base_dir)
        base_index = dirs.index(base_dir)
    if tui:
        from fairtui.app import run_app

        run_app(home=home, compare=[d.name for d in dirs])  # the baseline is the first
        return
    try:
        result = do_compare([RunView.load(d) for d in dirs], attack, checkpoint, base_index, n_per_class)
    except CompareError as err:
        raise fail(str(err)) from None
    if json_out:
        typer.echo(json.dumps(result.to_json()))
        return
    from rich.console import Console

    from fairtui.report import comparison_tables

    console = Console()
    for table in comparison_tables(result):
        console.print(table)
