"""`fairtui ls`: the run history, newest first."""

from __future__ import annotations

import fnmatch
from typing import Optional

import typer

from fairtui.cli.options import Home, HomeT, Json

HELP = "List runs, newest first, with filters."


def filter_docs(docs: list[dict], method, dataset, status, tag, name, sweep=None) -> list[dict]:
    out = []
    for d in docs:
        if sweep and not (d.get("sweep") or "").startswith(sweep):
            continue
        if method and d.get("method") != method or dataset and d.get("dataset") != dataset:
            continue
        if status and d.get("status") != status or tag and tag not in (d.get("tags") or []):
            continue
        if name and not fnmatch.fnmatch(d.get("name") or "", name):
            continue
        out.append(d)
    return out


def ls(
    method: Optional[str] = typer.Option(None, "--method"),
    dataset: Optional[str] = typer.Option(None, "--dataset"),
    status: Optional[str] = typer.Option(None, "--status", help="completed, failed, stopped, running, lost"),
    tag: Optional[str] = typer.Option(None, "--tag"),
    name: Optional[str] = typer.Option(None, "--name", help="a glob pattern, e.g. 'cfa-*'"),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="the children of a sweep (id or prefix)"),
    limit: int = typer.Option(50, "--limit", help="rows to show (0: all); --json always lists all"),
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json
    import time

    from fairtui.home import resolve_home
    from fairtui.store import RunIndex, headline

    index = RunIndex(resolve_home(home))
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
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(docs)} runs (accuracies: best checkpoint, first robust attack)",
                  title_justify="left")
    for col in ("id", "name", "method", "data", "status", "epoch", "clean", "robust", "worst", "started"):
        table.add_column(col, justify="right" if col in ("epoch", "clean", "robust", "worst") else "left",
                         no_wrap=col in ("id", "started"))
    shown = docs if limit == 0 else docs[:limit]
    for d in shown:
        _, r = headline(d)
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        started = time.strftime("%m-%d %H:%M", time.localtime(d["started"])) if d.get("started") else "-"
        table.add_row(d["run_id"], d.get("name") or "", d.get("method") or "", d.get("dataset") or "",
                      d.get("status") or "", f"{d.get('epoch', 0)}/{d.get('epochs', 0)}",
                      fmt(r and r.get("avg_clean")), fmt(r and r.get("avg_robust")),
                      fmt(r and r.get("worst_robust")), started)
    console = Console()
    console.print(table)
    if len(shown) < len(docs):
        typer.echo(f"{len(docs) - len(shown)} more; --limit 0 shows all", err=True)
