"""`fairtui ls`: the run history, newest first."""

from __future__ import annotations

from typing import Optional

import typer

from fairtui.cli.options import Home, HomeT, Json
from fairtui.runs.filters import filter_docs

HELP = "List runs, newest first, with filters."
STATUSES = ("completed", "imported", "failed", "stopped", "running", "starting", "queued", "lost")


def ls(
    method: Optional[str] = typer.Option(None, "--method"),
    dataset: Optional[str] = typer.Option(None, "--dataset"),
    status: Optional[str] = typer.Option(None, "--status", help="completed, imported, failed, stopped, running, "
                                         "queued, lost"),
    tag: Optional[str] = typer.Option(None, "--tag"),
    name: Optional[str] = typer.Option(None, "--name", help="a glob pattern, e.g. 'cfa-*'"),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="the children of a sweep (id, prefix or short id)"),
    limit: int = typer.Option(50, "--limit", min=0, help="rows to show (0: all); --json always lists all"),
    wide: bool = typer.Option(False, "--wide", help="every column, the full run id included, nothing cut"),
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json

    from fairtui.runs.home import resolve_home
    from fairtui.runs.store import RunIndex

    if status is not None and status not in STATUSES:
        from difflib import get_close_matches

        from fairtui.cli.options import fail

        close = get_close_matches(status, STATUSES, n=1)
        raise fail(f"--status {status!r} is no run status" + (f"; did you mean {close[0]!r}?" if close else "")
                   + f" (one of {', '.join(STATUSES)})")
    index = RunIndex(resolve_home(home))
    if sweep:
        from engine.contract.profile_schema import ProfileError
        from fairtui.cli.options import fail
        from fairtui.launch.sweep import resolve_sweep_id

        try:
            sweep = resolve_sweep_id(resolve_home(home), sweep)  # a short id too; an unknown one is refused
        except ProfileError as err:
            raise fail(str(err)) from None
    if json_out and not any((method, dataset, status, tag, name, sweep)):
        ready = index.listing_json()  # the index unchanged since its last write: print it as it is
        if ready is not None:
            import sys

            sys.stdout.write(ready)
            return
    docs = filter_docs(index.read(), method, dataset, status, tag, name, sweep)
    if json_out:
        import sys

        # Straight to stdout: click's echo would scan megabytes of JSON for ANSI codes.
        sys.stdout.write(json.dumps(docs, separators=(",", ":")) + "\n")
        return
    shown = docs if limit == 0 else docs[:limit]
    print_table(shown, len(docs), wide)
    if len(shown) < len(docs):
        typer.echo(f"{len(docs) - len(shown)} more; --limit 0 shows all", err=True)


# Columns in the order they are dropped last-to-first: at any width the most important come first
# (name, status, epoch, robust average and worst), and the rest join as the terminal grows.
PRIORITY = ("name", "status", "epoch", "robust", "worst", "id", "clean", "method", "data", "started", "run id")
ORDER = ("id", "name", "method", "data", "status", "epoch", "clean", "robust", "worst", "started", "run id")
NUMERIC = ("epoch", "clean", "robust", "worst")


def cells(d: dict) -> dict[str, str]:
    import time

    from fairtui.runs.home import short_id
    from fairtui.runs.store import headline
    from fairtui.runs.usertext import inert

    key, r = headline(d)
    # a mark says where a number comes from when it is not the best checkpoint's test result: "l" the last
    # checkpoint's (a run without a best one, or whose best is still being evaluated), "v" the latest validation
    # (a run with no test result yet, as the app shows it)
    mark = "l" if key.startswith("last/") else ""
    if r is None and d.get("val"):
        r, mark = {"avg_robust": d["val"].get("avg_robust"), "worst_robust": d["val"].get("worst_robust")}, "v"
    fmt = lambda v: "-" if v is None else f"{v:.3f}{mark}"  # noqa: E731
    epoch = "-" if d.get("status") == "imported" else f"{d.get('epoch', 0)}/{d.get('epochs', 0)}"
    return {"id": short_id(d["run_id"]), "run id": d["run_id"], "name": inert(d.get("name") or "", markup=True),
            "method": d.get("method") or "", "data": d.get("dataset") or "", "status": d.get("status") or "",
            "epoch": epoch, "clean": fmt(r and r.get("avg_clean")), "robust": fmt(r and r.get("avg_robust")),
            "worst": fmt(r and r.get("worst_robust")),
            "started": time.strftime("%m-%d %H:%M", time.localtime(d["started"])) if d.get("started") else "-"}


def cut_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its middle replaced by an ellipsis: run names of one profile differ
    at their ends ('cifar10-cpu-quick-dafa-lambda2-s1' -> 'cifar10-cpu…mbda2-s1')."""
    if len(text) <= width or width < 5:
        return text
    tail = (width - 1) // 2
    return text[:width - 1 - tail] + "…" + text[len(text) - tail:]


def choose_columns(rows: list[dict[str, str]], width: int, wide: bool) -> tuple[list[str], int]:
    """The columns that fit ``width`` (by priority) and the width the name column may take."""
    need = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in ORDER}
    if wide:
        return list(ORDER), need["name"]
    name_min = min(need["name"], 16)  # a name shrinks (with an ellipsis) before a column is dropped
    chosen, used = [], 0
    for col in PRIORITY:
        if col == "run id":
            continue  # the full id: --wide (or --json) only
        w = name_min if col == "name" else need[col]
        if used + w + 3 > width - 1 and chosen:
            continue
        chosen.append(col)
        used += w + 3
    name_width = min(need["name"], name_min + max(0, width - 1 - used))
    return [c for c in ORDER if c in chosen], name_width


def print_table(docs: list[dict], total: int, wide: bool) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    rows = [cells(d) for d in docs]
    columns, name_width = choose_columns(rows, console.width, wide)
    if not wide:  # a long name loses its middle, never its end: the seed and what a judgement's run changes
        from fairtui.runs.usertext import inert

        for r, d in zip(rows, docs):
            r["name"] = inert(cut_middle(d.get("name") or "", name_width), markup=True)
    marks = "; l: last checkpoint, v: validation" if any(c["robust"].endswith(("l", "v")) for c in rows) else ""
    table = Table(title=f"{total} run{'s' if total != 1 else ''} (accuracies: best checkpoint, first robust attack"
                  f"{marks})", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for col in columns:
        table.add_column(col, justify="right" if col in NUMERIC else "left", no_wrap=True,
                         overflow="ellipsis", min_width=name_width if col == "name" else None,
                         max_width=None if wide or col != "name" else name_width)
    for r in rows:
        table.add_row(*[r[c] for c in columns])
    if wide:
        console = Console(width=max(console.width, sum(len(c) for c in columns) * 4 + 200))
    console.print(table)
