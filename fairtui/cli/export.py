"""`fairtui export RUN... --format csv|md|latex|json`: paper tables, seeds grouped as mean ± std."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairtui.cli.groups import GROUP_OPTIONS, judging, with_group_options
from fairtui.cli.options import Attack, Checkpoint, Force, Home, HomeT, NPerClass, fail

HELP = ("Export runs as a paper table (runs differing only in seed are grouped as mean ± std), or as "
        "TensorBoard event files (--format tensorboard -o DIR).")


@with_group_options
def export(
    runs: List[str] = typer.Argument(None, metavar="RUN..."),
    fmt: str = typer.Option("md", "--format", help="csv, md, latex, json, or tensorboard (-o DIR: a folder "
                            "per run, needs the tensorboard extra)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write to a file instead of stdout "
                                          "(never inside the home; an existing file only with --force)"),
    force: bool = Force,
    attack: Optional[str] = Attack,
    checkpoint: str = Checkpoint,
    n_per_class: int = NPerClass,
    tag: Optional[str] = typer.Option(None, "--tag", help="export every run with this tag"),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="export a sweep: mean ± std over seeds per grid point"),
    groups: Optional[dict] = None,  # --by, --group, --results, --bases, --baseline, --against-start
    home: HomeT = Home,
) -> None:
    by, group, results, bases, baseline, against_start, allow, effect, family = (groups[k] for k, _, _ in
                                                                                        GROUP_OPTIONS)
    from fairtui.judge.compare import CompareError, export_rows
    from fairtui.judge.export import render
    from fairtui.runs.runfolder import RunView

    if by is not None or group or results:
        if runs or tag or sweep:
            raise fail("give either runs (--tag, --sweep), or groups (--by, --group with --results), not both")
        if fmt not in ("csv", "md", "latex", "json"):
            raise fail(f"groups export as csv, md, latex or json, got {fmt!r}")
        if by is None and not group:
            raise fail("--results needs --by or --group: which runs form which group")
        text = group_text(home, by, group, results, bases, baseline, attack, checkpoint, n_per_class, fmt,
                          against_start, judging(allow, effect, family))
        write_or_print(text, output, force, home)
        return

    if against_start:
        raise fail("--against-start pairs groups: give --by or --group with --baseline")
    if fmt not in ("csv", "md", "latex", "json", "tensorboard"):
        raise fail(f"--format must be csv, md, latex, json or tensorboard, got {fmt!r}")
    if fmt == "tensorboard" and not output:
        raise fail("--format tensorboard writes a folder: give it with -o DIR")
    from fairtui.cli.groups import collect_runs

    dirs = collect_runs(home, runs, tag, sweep)  # rows in the order given
    if not dirs:
        raise fail("name the runs to export (or --tag TAG, or --sweep ID)")
    if fmt == "tensorboard":
        from fairtui.runs.home import resolve_home
        from fairtui.judge.export import OutputError
        from fairtui.judge.tbexport import export as tb_export

        try:
            written = tb_export([RunView.load(d) for d in dirs], output, resolve_home(home), force)
        except OutputError as err:  # TensorBoardError too
            raise fail(str(err)) from None
        typer.echo(f"wrote {len(written)} run(s) under {output} (tensorboard --logdir {output})", err=True)
        return
    try:
        # runs named one by one are rows of their own; a --tag or --sweep selection is grouped by configuration
        rows = export_rows([RunView.load(d) for d in dirs], attack, checkpoint, n_per_class,
                           by_run=bool(runs) and not tag and not sweep)
    except CompareError as err:
        raise fail(str(err)) from None
    write_or_print(render(rows, fmt, checkpoint), output, force, home)


def write_or_print(text: str, output: "Path | None", force: bool, home: HomeT) -> None:
    if output:
        from fairtui.judge.export import OutputError, write_output
        from fairtui.runs.home import resolve_home

        try:
            written = write_output(output, text, resolve_home(home), force)
        except OutputError as err:
            raise fail(str(err)) from None
        typer.echo(f"wrote {written}", err=True)
    else:
        typer.echo(text, nl=False)


def group_text(home, by, group, results, bases, baseline, attack, checkpoint, n_per_class, fmt,
               against_start=False, judged: "dict | None" = None) -> str:
    """Groups of seeds and their paired differences with the baseline group (fairtui.judge.groups), as ``fmt``."""
    import json

    from fairtui.cli.groups import bases_views, named_groups
    from fairtui.judge.compare import CompareError
    from fairtui.judge.group_report import render as render_groups
    from fairtui.judge.groups import compare_groups

    named, left_out = named_groups(home, by, group, results, {})
    try:
        cmp = compare_groups(named, baseline, attack, checkpoint, n_per_class, bases_views(bases), against_start,
                             **(judged or {}), left_out=left_out)
    except CompareError as err:
        raise fail(str(err)) from None
    return json.dumps(cmp.to_json(), indent=1) + "\n" if fmt == "json" else render_groups(cmp, fmt)


