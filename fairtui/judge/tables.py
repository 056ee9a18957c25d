"""The `compare RUN RUN` tables: per-class clean / robust accuracy, the summary with deltas and rho, and the keys of
the configuration that differ."""

from __future__ import annotations

from rich.table import Table

from fairtui.runs.home import short_id
from fairtui.runs.report import _fmt
from fairtui.runs.usertext import inert


def rho_cell(column, is_baseline: bool, base) -> str:
    """rho against the baseline, or why there is none."""
    if is_baseline:
        return ""
    if column.rho is not None:
        return f"{column.rho:+.3f}"
    if base.summary.get("worst_robust") == 0:
        return "undefined: the baseline's worst class is 0"
    return "undefined: the baseline's average is 0"


def comparison_tables(cmp) -> list[Table]:
    """The compare command's tables: per class, summary with deltas and rho, configuration diff."""
    cols = cmp.columns
    labels = [f"{inert(c.view.name, markup=True)} [{short_id(c.view.run_id)}]" + (" (base)" if i == cmp.baseline
                                                                                 else "") for i, c in enumerate(cols)]
    what = (f"{cmp.settings[0]} @ {cmp.checkpoint}" if not cmp.mixed
            else f"@ {cmp.checkpoint}; SETTINGS DIFFER between runs: see the 'measured with' row")
    title = f"clean / robust per class ({what}); < marks each run's worst class"
    per_class = Table(title=title, title_justify="left", min_width=min(len(title), 80))
    per_class.add_column("class")
    for label in labels:
        per_class.add_column(label, justify="right")
    for i, name in enumerate(cmp.class_names):
        cells = []
        for c in cols:
            cell = f"{_fmt(c.result['clean_acc_per_class'][i])} / {_fmt(c.result['robust_acc_per_class'][i])}"
            cells.append(f"[bold red]{cell} <[/]" if c.worst_class == i else cell)
        per_class.add_row(name, *cells)
    summary = Table(title="summary (delta against the baseline)", title_justify="left")
    summary.add_column("metric")
    for label in labels:
        summary.add_column(label, justify="right")
    for key, label in (("avg_clean", "clean average"), ("avg_robust", "robust average"),
                       ("worst_robust", "robust worst class"), ("worst20_robust", "robust worst 20%"),
                       ("cv", "CV: class var. (fraction^2)"), ("mcd", "MCD")):
        digits = 4 if key == "cv" else 3
        cells = []
        for i, c in enumerate(cols):
            delta = "" if i == cmp.baseline else f" ({c.deltas[key]:+.{digits}f})"
            cells.append(f"{_fmt(c.summary[key], digits)}{delta}")
        summary.add_row(label, *cells)
    summary.add_row("rho (WAT Eq. 7)", *[rho_cell(c, i == cmp.baseline, cols[cmp.baseline])
                                         for i, c in enumerate(cols)])
    summary.add_row("measured with", *cmp.settings)
    tables = [per_class, summary]
    if cmp.diff:
        diff = Table(title="configuration: the keys that differ", title_justify="left")
        diff.add_column("key")
        for label in labels:
            diff.add_column(label)
        for key, values in cmp.diff.items():
            diff.add_row(inert(key, markup=True), *["-" if v is None else inert(str(v), markup=True) for v in values])
        tables.append(diff)
    return tables
