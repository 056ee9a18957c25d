"""Comparing runs and exporting paper tables: plain Python shared by the commands and the app."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from engine import metrics
from fairtui.runfolder import RunView


class CompareError(ValueError):
    """A comparison that cannot be made; the message says what the runs have instead."""


def flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_diff(configs: list[dict], ignore: tuple[str, ...] = ()) -> dict[str, list[Any]]:
    """Only the keys whose values differ between the configurations (absent keys show as None)."""
    flat = [flatten(c) for c in configs]
    keys = sorted(set().union(*flat)) if flat else []
    return {k: [f.get(k) for f in flat] for k in keys
            if k not in ignore and len({repr(f.get(k)) for f in flat}) > 1}


def pick_result(view: RunView, attack: str | None, checkpoint: str, split: str = "test") -> dict:
    """The run's result for (split, checkpoint, attack); attack None: its first robust attack."""
    results = view.results()
    candidates = [k for k in results if k[0] == split and k[1] == checkpoint]
    if attack is None:
        robust = [k for k in candidates if k[2] != "clean"]
        if not robust:
            raise CompareError(f"run {view.name} [{view.run_id}] has no {split} result at checkpoint "
                               f"{checkpoint!r}; it has: {describe(results)}")
        return results[robust[0]]
    key = (split, checkpoint, attack)
    if key not in results:
        raise CompareError(f"run {view.name} [{view.run_id}] has no {attack} result on {split} at {checkpoint!r}; "
                           f"it has: {describe(results)} (fairtui eval {view.run_id} --attack {attack})")
    return results[key]


def describe(results: dict) -> str:
    return ", ".join(f"{c}/{a}" for (s, c, a) in results) or "no evaluation results"


@dataclass
class RunColumn:
    view: RunView
    result: dict
    summary: dict = field(default_factory=dict)
    deltas: dict = field(default_factory=dict)
    rho: float | None = None
    worst_class: int | None = None


@dataclass
class Comparison:
    class_names: list[str]
    attack: str
    checkpoint: str
    columns: list[RunColumn]
    baseline: int
    diff: dict[str, list[Any]]

    def to_json(self) -> dict:
        return {
            "attack": self.attack, "checkpoint": self.checkpoint, "class_names": self.class_names,
            "baseline": self.columns[self.baseline].view.run_id,
            "runs": [{"run_id": c.view.run_id, "name": c.view.name, "attack": c.result.get("attack"),
                      "clean_acc_per_class": c.result["clean_acc_per_class"],
                      "robust_acc_per_class": c.result["robust_acc_per_class"], "summary": c.summary,
                      "delta_vs_baseline": c.deltas, "rho": c.rho, "worst_class": c.worst_class}
                     for c in self.columns],
            "config_diff": self.diff,
        }


def summarise(result: dict) -> dict[str, float]:
    robust, clean = result["robust_acc_per_class"], result["clean_acc_per_class"]
    s = metrics.summary(robust)
    return {"avg_clean": metrics.average(clean), "avg_robust": s["avg"], "worst_robust": s["worst"],
            "worst20_robust": s["worst20"], "cv": s["cv"], "mcd": s["mcd"]}


def compare(views: list[RunView], attack: str | None = None, checkpoint: str = "best",
            baseline: int = 0) -> Comparison:
    if len(views) < 2:
        raise CompareError("compare needs at least two runs")
    columns = [RunColumn(v, pick_result(v, attack, checkpoint)) for v in views]
    names = views[0].class_names()
    for c in columns:
        if len(c.result["robust_acc_per_class"]) != len(names):
            raise CompareError(f"run {c.view.run_id} has {len(c.result['robust_acc_per_class'])} classes, "
                               f"{views[0].run_id} has {len(names)}: they are not comparable")
        c.summary = summarise(c.result)
        robust = c.result["robust_acc_per_class"]
        c.worst_class = min(range(len(robust)), key=lambda i: (robust[i] is None, robust[i]))
    base = columns[baseline].summary
    for c in columns:
        c.deltas = {k: c.summary[k] - base[k] for k in c.summary}
        if base["worst_robust"] > 0 and base["avg_robust"] > 0:
            c.rho = metrics.rho(c.summary["avg_robust"], c.summary["worst_robust"], base["avg_robust"],
                                base["worst_robust"])
    diff = config_diff([v.config for v in views], ignore=("description",))
    return Comparison(names, attack or columns[0].result["attack"], checkpoint, columns, baseline, diff)


# -- export: paper tables with mean ± std over seeds ---------------------------------------------------

EXPORT_METRICS = ("avg_clean", "avg_robust", "worst_robust", "worst20_robust", "cv", "mcd")


def group_key(view: RunView) -> str:
    """Runs that share a profile up to seed and name form one group."""
    flat = flatten(view.config)
    for k in ("seed", "name", "description"):
        flat.pop(k, None)
    return repr(sorted(flat.items()))


@dataclass
class ExportRow:
    label: str
    runs: list[str]
    values: dict[str, list[float]]

    def mean_std(self, key: str) -> tuple[float, float]:
        vals = [v for v in self.values.get(key, []) if v is not None and not math.isnan(v)]
        if not vals:
            return math.nan, math.nan
        return statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def export_rows(views: list[RunView], attack: str | None, checkpoint: str) -> list[ExportRow]:
    groups: dict[str, list[RunView]] = {}
    for v in views:
        groups.setdefault(group_key(v), []).append(v)
    rows = []
    for members in groups.values():
        values: dict[str, list[float]] = {k: [] for k in EXPORT_METRICS}
        for v in members:
            s = summarise(pick_result(v, attack, checkpoint))
            for k in EXPORT_METRICS:
                values[k].append(s[k])
        label = members[0].config.get("name") or members[0].name
        seeds = sorted(v.config.get("seed") for v in members)
        rows.append(ExportRow(f"{label} (seeds {', '.join(map(str, seeds))})" if len(members) > 1 else label,
                              [v.run_id for v in members], values))
    return rows
