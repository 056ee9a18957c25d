"""Human and JSON renderings of a run: the epoch line, per-class tables, the summary document."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from engine.contract.results import describe
from fairtui.runs.runfolder import RunView
from fairtui.runs.usertext import inert


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _argmin(values: list[float | None]) -> int | None:
    pairs = [(v, i) for i, v in enumerate(values) if v is not None]
    return min(pairs)[1] if pairs else None


def epoch_line(event: dict, names: list[str]) -> str:
    train, val = event.get("train", {}), event.get("val", {})
    robust = val.get("robust_acc_per_class") or []
    worst = _argmin(robust)
    worst_name = names[worst] if worst is not None and worst < len(names) else worst
    best = " *" if event.get("is_best") else ""
    # a method's pass over the epoch before training (CSR's confusion matrix), within the epoch's seconds
    prepared = f" ({event['prepare_s']:.0f}s before training)" if event.get("prepare_s") else ""
    # accuracies as clean/robust (EPOCH_LEGEND says so once): the line fits 120 columns
    return (f"epoch {event['epoch']:>3}/{event.get('epochs', '?')} loss {_fmt(train.get('loss'), 4)} | "
            f"train {_fmt(train.get('clean_acc'))}/{_fmt(train.get('robust_acc'))} | "
            f"val {_fmt(val.get('avg_clean'))}/{_fmt(val.get('avg_robust'))} "
            f"worst {_fmt(val.get('worst_robust'))} ({worst_name}) | "
            f"lr {event.get('lr', 0):.3g} {event.get('time_s', 0):.0f}s{prepared}{best}")


EPOCH_LEGEND = ("each epoch: loss | train clean/robust accuracy | val clean/robust, worst class (its name) | "
                "lr, seconds; * new best")


def exploratory_groups(view: RunView) -> list[tuple[tuple[str, ...], dict]]:
    """The run's other evaluations (a subset, another eps, ...) grouped by checkpoint and setting, in the
    order measured: (what differs from the profile, (split, checkpoint, attack) -> the latest result)."""
    groups: dict[tuple, dict] = {}
    for e, why in view.other_results():
        groups.setdefault((e.get("split"), e.get("checkpoint"), tuple(why)), {})[
            (e.get("split"), e.get("checkpoint"), e.get("attack"))] = e  # the latest of each
    return [(why, results) for (_, _, why), results in groups.items()]


def exploratory_tables(view: RunView, groups: list | None = None) -> list[Table]:
    """Exploratory results as per-class tables like the headline ones, one per checkpoint and setting, each
    titled as exploratory with what differs from the profile. ``groups``: those of :func:`exploratory_groups`
    to draw (a run evaluated thousands of ways draws the latest few; default all)."""
    return [t for why, results in (exploratory_groups(view) if groups is None else groups)
            for t in per_class_tables(view, results, note=f"exploratory ({'; '.join(why)})")]


def _merge_same_checkpoints(by_ckpt: dict[str, dict[int, dict[str, dict]]]) -> None:
    """One table, "test @ last = best (epoch 30)", where the best checkpoint is the last and their results are
    the same numbers (the quickstart printed two identical tables)."""
    def numbers(subsets: dict) -> list:
        return [(n, a, r.get("clean_acc_per_class"), r.get("robust_acc_per_class"))
                for n, attacks in sorted(subsets.items()) for a, r in sorted(attacks.items())]

    for key in [k for k in by_ckpt if " @ best (epoch " in k]:
        last = key.replace(" @ best (", " @ last (")
        if last in by_ckpt and numbers(by_ckpt[last]) == numbers(by_ckpt[key]):
            merged = last.replace(" @ last (", " @ last = best (")
            by_ckpt[merged] = by_ckpt.pop(last)
            del by_ckpt[key]


def per_class_tables(view: RunView, results: dict | None = None, note: str = "") -> list[Table]:
    """One table per evaluated checkpoint and setting: a row per class, a column per attack, summary
    rows below. ``results``: (split, checkpoint, attack) -> eval_result; default the run's headline ones.
    ``note`` starts each title (e.g. what makes the results exploratory)."""
    names = view.class_names()
    by_ckpt: dict[str, dict[str, dict]] = {}
    for (split, ckpt, attack), result in (view.results() if results is None else results).items():
        subset = result.get("n_per_class") or (result.get("setting") or {}).get("n_per_class") or 0
        by_ckpt.setdefault(f"{split} @ {ckpt} (epoch {result.get('epoch', '?')})", {}).setdefault(
            subset, {})[attack] = result
    _merge_same_checkpoints(by_ckpt)
    tables = []
    for where, attacks in ((w, a) for w, subsets in by_ckpt.items() for a in subsets.values()):
        settings = sorted({describe(r) for a, r in attacks.items() if a != "clean"}) or \
            [describe(next(iter(attacks.values())))]
        title = f"{note + ': ' if note else ''}{inert(view.name, markup=True)} [{view.run_id}]: {where}, " \
                f"{'; '.join(settings)}"
        # as wide as its title (no word-per-line wrap over a narrow table), at most the terminal's width
        table = Table(title=title, title_justify="left", min_width=len(title))
        table.add_column("class")
        first = next(iter(attacks.values()))
        table.add_column("clean", justify="right")
        robust_attacks = [a for a in attacks if a != "clean"]
        for a in robust_attacks:
            table.add_column(f"robust {a}", justify="right")
        cvc = first.get("cvc_per_class")
        if cvc:
            table.add_column("CVC", justify="right")  # Tian et al.: variance of the clean confidence
        if cvc:
            table.caption = "CVC: the variance of each class's clean confidence (Tian et al.)"
            table.caption_justify = "left"
        worst = {a: _argmin(attacks[a]["robust_acc_per_class"]) for a in robust_attacks}
        for i, name in enumerate(names):
            cells = [_fmt(first["clean_acc_per_class"][i])]
            for a in robust_attacks:
                cell = _fmt(attacks[a]["robust_acc_per_class"][i])
                cells.append(f"[bold red]{cell} <[/]" if worst[a] == i else cell)
            if cvc:
                cells.append(_fmt(cvc[i], 4))
            table.add_row(name, *cells)
        table.add_section()
        for label, key in (("average", "avg_robust"), ("worst class", "worst_robust"),
                           ("worst 20%", "worst20_robust"), ("CV: class variance (fraction^2)", "cv"), ("MCD", "mcd")):
            clean_key = {"avg_robust": "avg_clean", "worst_robust": "worst_clean", "cv": "cv_clean"}.get(key)
            clean_cell = _fmt(first.get(clean_key), 4 if key == "cv" else 3) if clean_key else ""
            table.add_row(label, clean_cell, *[_fmt(attacks[a].get(key), 4 if key == "cv" else 3)
                                               for a in robust_attacks])
        tables.append(table)
    return tables


def _state_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def method_state_tables(state: dict[str, Any], names: list[str], width: int = 80) -> tuple[list[Table], list[str]]:
    """A method's class-wise state as labelled per-class tables that fit ``width`` columns (as many
    tables as it takes), and its other values as "key: value" lines. A vector of K + 1 values is WAT's
    (overall first): its rows are "overall" and the classes; a K-vector leaves "overall" blank."""
    k = len(names)
    vectors = {key: v for key, v in state.items() if isinstance(v, list) and len(v) in (k, k + 1)
               and all(v_ is None or isinstance(v_, (int, float)) for v_ in v)}  # a K x K matrix is a line
    wide = any(len(v) == k + 1 for v in vectors.values())
    rows = (["overall"] if wide else []) + list(names)
    label_width = max(len(r) for r in rows) + 3 if rows else 8
    groups: list[list[str]] = [[]]
    used = label_width
    for key, values in vectors.items():
        col = max(len(key), *(len(_state_cell(v)) for v in values)) + 3
        if groups[-1] and used + col > width:
            groups.append([])
            used = label_width
        groups[-1].append(key)
        used += col
    tables = []
    for keys in (g for g in groups if g):
        table = Table(title_justify="left")
        table.add_column("class")
        for key in keys:
            table.add_column(key, justify="right")
        for i, row in enumerate(rows):
            cells = []
            for key in keys:
                v = vectors[key]
                j = i if len(v) == len(rows) else i - (len(rows) - len(v))  # K-vectors skip "overall"
                cells.append(_state_cell(v[j]) if j >= 0 else "")
            table.add_row(row, *cells)
        tables.append(table)
    lines = [f"{key}: {_state_cell(v) if not isinstance(v, list) else ', '.join(map(_state_cell, v))}"
             for key, v in state.items() if key not in vectors]
    return tables, lines


def run_summary(view: RunView, exit_code: int | None = None) -> dict[str, Any]:
    """The run as one JSON-ready document (for ``--json``)."""
    fin = view.finished or {}
    epochs = view.last_epochs(1)  # the latest alone: a long run's others stay unread
    return {
        "run_id": view.run_id, "name": view.name, "run_dir": str(view.run_dir), "status": view.status(),
        "error": fin.get("error"), "exit_code": exit_code, "class_names": view.class_names(),
        "epochs_done": epochs[-1]["epoch"] if epochs else 0, "epochs": view.total_epochs(),
        "best_epoch": epochs[-1].get("best_epoch") if epochs else None,
        "method": view.config.get("method", {}).get("name"),
        "dataset": view.config.get("data", {}).get("dataset"),
        "imported": view.imported,  # where an imported model came from; None for a trained run
        "init": (view.started or {}).get("init"),  # the checkpoint a fine-tune loaded, as the engine recorded it
        "teacher": (view.started or {}).get("teacher"),  # a distillation's teacher, as the engine recorded it
        "results": result_rows(view.results().values()),
        # exploratory evaluations (another eps, a subset, ...): never the run's numbers
        "other_results": [{**result_rows([e])[0], "differs": why} for e, why in view.other_results()],
    }


RESULT_KEYS = ("split", "checkpoint", "epoch", "attack", "eps", "n_per_class", "setting", "avg_clean", "avg_robust",
               "worst_robust", "worst20_robust", "cv", "mcd", "clean_acc_per_class", "robust_acc_per_class")


def result_rows(results) -> list[dict]:
    return [{k: r.get(k) for k in RESULT_KEYS} for r in results]
