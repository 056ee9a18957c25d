"""`fairtui show RUN`: configuration, per-class results, the method's final state, timings."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from engine.contract.results import eps_text
from fairtui.cli.groups import Results
from fairtui.cli.options import Home, HomeT, Json
from fairtui.runs.display import SHOW_EXPLORATORY

HELP = "Show one run: configuration, per-class results per attack and checkpoint, method state, timings."


def show(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    all_results: bool = typer.Option(False, "--all", help=f"every exploratory evaluation (default: the latest "
                                     f"{SHOW_EXPLORATORY} settings)"),
    results: List[Path] = Results,
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json

    from fairtui.cli.groups import resolve_any, results_pool
    from fairtui.runs.report import run_summary

    view = resolve_any(home, run_ref, results_pool(results))  # a committed run (--results) or the home's
    for warning in view.warnings:
        typer.echo(f"warning: {warning}", err=True)
    last = view.last_epoch  # a long run's other epochs stay unread
    # the last epoch whole (the digest leaves its matrices out): one line of the stream, not the stream
    method_state = view.full(last).get("method_state", {}) if last else {}
    times = [t or 0 for t in view.epoch_times()]
    if json_out:
        doc = run_summary(view)
        doc.update({"config": view.config, "method_state": method_state, "meta": view.meta,
                    "sessions": view.training_sessions,
                    "timing": {"epochs": len(times), "total_s": sum(times),
                               "mean_epoch_s": sum(times) / len(times) if times else None}})
        typer.echo(json.dumps(doc))
        return
    from rich.console import Console
    from rich.text import Text

    from fairtui.runs.usertext import inert

    console = Console()
    cfg = view.config
    error = view.finished.get("error") if view.finished else None
    # user text as Text, never markup: a name with brackets is printed as it is
    console.print(Text.assemble((inert(view.name), "bold"), f" [{view.run_id}]  status ", (view.status(), "bold"),
                                f": {inert(error)}" if error else ""))
    trained = f"epochs {len(times)}/{view.total_epochs()}, " if view.imported is None else ""
    console.print(Text(f"method {cfg.get('method', {}).get('name')}, data {cfg.get('data', {}).get('dataset')}, "
                       f"model {cfg.get('model', {}).get('arch')}, seed {cfg.get('seed')}, "
                       f"eps {eps_text(cfg.get('attack', {}).get('eps'))}, {trained}"
                       f"tags {inert(', '.join(view.meta.get('tags', []))) or '-'}"))
    if view.imported is not None:
        console.print(Text(import_source_line(view.imported)))
    start = start_line(view)
    if start:
        console.print(Text(start))
    from fairtui.runs.runstate import teacher_text

    taught = teacher_text((view.started or {}).get("teacher"))
    if taught:
        console.print(Text(taught))
    if times:
        console.print(f"time: {sum(times):.0f} s over {len(times)} epochs ({sum(times) / len(times):.1f} s each)")
    from fairtui.runs.provenance import provenance_line

    where = provenance_line(view)
    if where:
        console.print(Text(where))
    if view.meta.get("notes"):
        console.print(Text(f"notes: {inert(view.meta['notes'], keep_newlines=True)}"))
    print_tables(console, view, all_results, method_state, last)


def print_tables(console, view, all_results: bool, method_state: dict, last: dict | None) -> None:
    """`show`'s tables: per class, the exploratory evaluations (the latest few unless ``--all``), the method's
    class-wise state after its last epoch."""
    from rich.text import Text

    from fairtui.runs.report import exploratory_groups, exploratory_tables, method_state_tables, per_class_tables

    for table in per_class_tables(view):
        console.print(table)
    groups = exploratory_groups(view)
    if groups:
        console.print("[bold]other evaluations[/] (not the run's result: settings differ from the profile)")
        hidden = 0 if all_results else max(0, len(groups) - SHOW_EXPLORATORY)
        if hidden:
            console.print(f"{hidden} earlier exploratory tables not shown (the latest {SHOW_EXPLORATORY} are): "
                          f"fairtui show {view.run_id} --all", soft_wrap=True)
        for table in exploratory_tables(view, groups[hidden:]):  # only the tables shown are built
            console.print(table)
    if method_state:
        tables, lines = method_state_tables(method_state, view.class_names(), console.width)
        console.print(Text(f"method state after epoch {last['epoch']} ({view.config.get('method', {}).get('name')})",
                           style="bold"))
        for table in tables:
            console.print(table)
        for line in lines:
            console.print(Text(line))


def start_line(view) -> str | None:
    """Where a fine-tune started: the checkpoint the engine recorded as loaded (run, best or last, epoch, SHA-256),
    or for a run from before that record, ``method.init_from`` and the checkpoint the engine's rule gives."""
    from fairtui.judge.starts import start_of
    from fairtui.runs.usertext import inert

    start = start_of(view)
    if start is None:
        return None
    if start.recorded:
        where = (f"run {start.run_id}'s {start.checkpoint} checkpoint (epoch {start.epoch})" if start.checkpoint
                 else inert(start.file))
        return f"fine-tuned from {where}; sha256 {str(start.sha256)[:16]}..."
    ref = (view.config.get("method") or {}).get("init_from")
    what = f"its {start.checkpoint} checkpoint, by the engine's rule" if start.checkpoint else "that file"
    return f"fine-tuned from {inert(ref)} ({what}; the run predates the engine's record of what it loaded)"


def import_source_line(src: dict) -> str:
    """Where an imported model came from, and the normalisation fairtui puts in front of it."""
    what = src.get("robustbench_name") or src.get("path")
    mean, std = src.get("mean") or [], src.get("std") or []
    if mean and all(m == 0 for m in mean) and all(s == 1 for s in std):
        norm = "none added (the model takes [0, 1] pixels)"
    elif mean:
        norm = f"mean {', '.join(f'{m:.4g}' for m in mean)}; std {', '.join(f'{s:.4g}' for s in std)}"
    else:
        norm = "the file's own (a whole fairtui model, its normalisation layer included)"
    return f"imported {src.get('kind')}: {what} (sha256 {str(src.get('sha256'))[:16]}...); normalisation: {norm}"
