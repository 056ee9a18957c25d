"""`fairtui show RUN`: configuration, per-class results, the method's final state, timings."""

from __future__ import annotations

import typer

from fairtui.cli.options import Home, HomeT, Json, resolve_run

HELP = "Show one run: configuration, per-class results per attack and checkpoint, method state, timings."


def show(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json

    from fairtui.report import run_summary
    from fairtui.runfolder import RunView

    view = RunView.load(resolve_run(home, run_ref))
    for warning in view.warnings:
        typer.echo(f"warning: {warning}", err=True)
    epochs = view.epochs
    method_state = epochs[-1].get("method_state", {}) if epochs else {}
    times = [e.get("time_s", 0) for e in epochs]
    if json_out:
        doc = run_summary(view)
        doc.update({"config": view.config, "method_state": method_state, "meta": view.meta,
                    "timing": {"epochs": len(times), "total_s": sum(times),
                               "mean_epoch_s": sum(times) / len(times) if times else None}})
        typer.echo(json.dumps(doc))
        return
    from rich.console import Console
    from rich.table import Table

    from fairtui.report import other_result_lines, per_class_tables

    console = Console()
    cfg = view.config
    console.print(f"[bold]{view.name}[/] [{view.run_id}]  status [bold]{view.status()}[/]"
                  + (f": {view.finished.get('error')}" if view.finished and view.finished.get("error") else ""))
    trained = f"epochs {len(epochs)}/{view.total_epochs()}, " if view.imported is None else ""
    console.print(f"method {cfg.get('method', {}).get('name')}, data {cfg.get('data', {}).get('dataset')}, "
                  f"model {cfg.get('model', {}).get('arch')}, seed {cfg.get('seed')}, "
                  f"eps {cfg.get('attack', {}).get('eps'):.4g}, {trained}"
                  f"tags {', '.join(view.meta.get('tags', [])) or '-'}")
    if view.imported is not None:
        src = view.imported
        what = src.get("robustbench_name") or src.get("path")
        console.print(f"imported {src.get('kind')}: {what} (sha256 {str(src.get('sha256'))[:16]}...), "
                      f"normalisation mean {src.get('mean') or 'from the file'} std {src.get('std') or ''}")
    if times:
        console.print(f"time: {sum(times):.0f} s over {len(times)} epochs ({sum(times) / len(times):.1f} s each)")
    if view.meta.get("notes"):
        console.print(f"notes: {view.meta['notes']}")
    for table in per_class_tables(view):
        console.print(table)
    others = other_result_lines(view)
    if others:
        console.print("[bold]other evaluations[/] (not the run's result: settings differ from the profile)")
        for line in others:
            console.print("  " + line, highlight=False)
    if method_state:
        names = view.class_names()
        table = Table(title=f"method state after epoch {epochs[-1]['epoch']}", title_justify="left")
        per_class = {k: v for k, v in method_state.items() if isinstance(v, list) and len(v) == len(names)}
        table.add_column("class")
        for key in per_class:
            table.add_column(key, justify="right")
        for i, n in enumerate(names):
            table.add_row(n, *[f"{v[i]:.3f}" if isinstance(v[i], (int, float)) else str(v[i])
                               for v in per_class.values()])
        console.print(table)
        for key, value in method_state.items():
            if key not in per_class:
                console.print(f"{key}: {value}")
