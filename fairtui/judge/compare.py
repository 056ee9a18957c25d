"""Comparing runs and exporting paper tables: plain Python shared by the commands and the app."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from engine.contract import metrics
from engine.contract.protocol import RUNTIME_FP32
from fairtui.runs.configurations import by_configuration, flatten, replicates_apart, runtime_ran
from fairtui.runs.runfolder import RunView


class CompareError(ValueError):
    """A comparison that cannot be made; the message says what the runs have instead."""


def config_diff(configs: list[dict], ignore: tuple[str, ...] = ()) -> dict[str, list[Any]]:
    """Only the keys whose values differ between the configurations (absent keys show as None)."""
    flat = [flatten(c) for c in configs]
    keys = sorted(set().union(*flat)) if flat else []
    return {k: [f.get(k) for f in flat] for k in keys
            if k not in ignore and len({repr(f.get(k)) for f in flat}) > 1}


def pick_result(view: RunView, attack: str | None, checkpoint: str, split: str = "test",
                n_per_class: int = 0) -> dict:
    """The run's result for (split, checkpoint, attack); attack None: its first robust attack.

    ``n_per_class`` 0: the run's headline result (the profile's settings, the whole split); N: the latest
    result on the class-balanced subset of N images per class at the profile's other settings (what
    `fairtui eval --n-per-class N` writes). A refusal lists every result the run has, with its settings."""
    results = view.results() if not n_per_class else subset_results(view, n_per_class)
    candidates = [k for k in results if k[0] == split and k[1] == checkpoint]
    where = f"on {split} at {checkpoint!r}" + (f" on {n_per_class} per class" if n_per_class else "")
    if attack is None:
        robust = [k for k in candidates if k[2] != "clean"]
        if not robust:
            raise CompareError(f"run {view.name} [{view.run_id}] has no robust result {where}; it has: "
                               f"{describe(view)}")
        return results[robust[0]]
    key = (split, checkpoint, attack)
    if key not in results:
        subset = f" --n-per-class {n_per_class}" if n_per_class else ""
        raise CompareError(f"run {view.name} [{view.run_id}] has no {attack} result {where}; it has: "
                           f"{describe(view)} (fairtui eval {view.run_id} --attack {attack}{subset})")
    return results[key]


def subset_results(view: RunView, n_per_class: int) -> dict[tuple[str, str, str], dict]:
    """The latest result per (split, checkpoint, attack) on N images per class, at the profile's settings
    otherwise (eps, step, seed, batching)."""
    from engine.contract.results import recorded_matches, requested_setting

    out: dict[tuple[str, str, str], dict] = {}
    for e in view.eval_results():
        attack = e.get("attack", "")
        wanted = requested_setting(view.config, attack, n_per_class=n_per_class)
        if e.get("setting") is not None and recorded_matches(e["setting"], wanted):
            out[(e.get("split"), e.get("checkpoint"), attack)] = e
    return out


DESCRIBE_MAX = 10  # results named in a refusal; the rest are counted (an eps sweep has hundreds)


def describe(view: RunView) -> str:
    """The results the run has, with the settings that produced each: "best/pgd20 (eps 0.2, whole
    split)"; the latest DESCRIBE_MAX of them, and how many more `fairtui show RUN` lists."""
    from engine.contract.results import describe as settings

    seen = list(dict.fromkeys(f"{e.get('split')} {e.get('checkpoint')}/{e.get('attack')} ({settings(e)})"
                              for e in view.eval_results()))
    if len(seen) > DESCRIBE_MAX:
        more = len(seen) - DESCRIBE_MAX
        return ", ".join(seen[-DESCRIBE_MAX:]) + f" and {more} earlier (fairtui show {view.run_id})"
    return ", ".join(seen) or "no evaluation results"


def setting_label(result: dict) -> str:
    """What a result is, for a table's title: "pgd20, eps 0.2, whole split"."""
    from engine.contract.results import describe as settings

    return f"{result.get('attack')}, {settings(result)}"


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

    @property
    def settings(self) -> list[str]:
        """Each column's attack and setting ("pgd20, eps 0.2, whole split")."""
        return [setting_label(c.result) for c in self.columns]

    @property
    def mixed(self) -> bool:
        """True when the columns' results were not measured the same way (attack, eps or subset)."""
        return len(set(self.settings)) > 1

    def to_json(self) -> dict:
        return {
            "attack": self.attack, "checkpoint": self.checkpoint, "class_names": self.class_names,
            "baseline": self.columns[self.baseline].view.run_id, "settings_differ": self.mixed,
            "runs": [{"run_id": c.view.run_id, "name": c.view.name, "attack": c.result.get("attack"),
                      "setting": c.result.get("setting"), "n_per_class": c.result.get("n_per_class", 0),
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
            baseline: int = 0, n_per_class: int = 0) -> Comparison:
    if len(views) < 2:
        raise CompareError("compare needs at least two runs")
    columns = [RunColumn(v, pick_result(v, attack, checkpoint, n_per_class=n_per_class)) for v in views]
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
    # what ran, beside what was asked: two runs of "auto" on different CPUs may have trained in fp32 and bf16
    # and where the arithmetic came from (fairtui.runs.provenance.provenance_keys): CPU, kernels, env, code
    from fairtui.runs.provenance import provenance_keys

    diff = config_diff([{**v.config, "runtime": runtime_ran(v), "provenance": provenance_keys(v)} for v in views],
                       ignore=("description",))
    return Comparison(names, attack or columns[0].result["attack"], checkpoint, columns, baseline, diff)


# -- export: paper tables with mean ± std over seeds ---------------------------------------------------

EXPORT_METRICS = ("avg_clean", "avg_robust", "worst_robust", "worst20_robust", "cv", "mcd")


@dataclass
class ExportRow:
    label: str
    runs: list[str]
    values: dict[str, list[float]]
    # the attack and settings of the row's results ("pgd20, eps 0.2, whole split"), and the training's runtime
    # where it was not fp32 ("...; trained with autocast bfloat16, channels-last")
    setting: str = ""
    set_aside: list[str] = field(default_factory=list)  # replicates of a seed the row holds, named

    def mean_std(self, key: str) -> tuple[float, float]:
        vals = [v for v in self.values.get(key, []) if v is not None and not math.isnan(v)]
        if not vals:
            return math.nan, math.nan
        return statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def seed_groups(views: list[RunView]) -> list[tuple[str, list[RunView], list[str]]]:
    """The runs grouped by configuration (:func:`fairtui.runs.configurations.by_configuration`), each group with its
    label ("at (seeds 0, 1, 2)") and the replicates it set aside: runs of one configuration and one seed are
    replicates, never pooled as seeds (:func:`fairtui.runs.configurations.replicates_apart` keeps the first). A
    group that holds a seed twice is split first by the run each started from (fine-tunes of two bases that look
    alike: committed files whose bases are not at hand)."""
    out = []
    for label, members in by_configuration(views):
        seeds = [v.config.get("seed") for v in members]
        parts = [members]
        if len(set(seeds)) < len(seeds):
            by_base: dict[str, list[RunView]] = {}
            for v in members:
                by_base.setdefault(repr(flatten(v.config).get("method.init_from")), []).append(v)
            parts = list(by_base.values())
        for part in parts:
            kept, aside = replicates_apart(part)
            seeds = [v.config.get("seed") for v in kept]
            out.append((f"{label} (seeds {', '.join(map(str, seeds))})" if len(kept) > 1 else label, kept, aside))
    return out


def run_rows(views: list[RunView]) -> list[tuple[str, list[RunView], list[str]]]:
    """Runs named one by one: each a row of its own, labelled by its name, in the order given."""
    return [(v.name, [v], []) for v in views]


def result_setting(view: RunView, result: dict, where: str = "") -> str:
    """A result's setting as a table or figure names it: the attack's (:func:`setting_label`), then ``where``, then
    the training's runtime when it was not fp32 ("; trained with autocast bfloat16, channels-last"): bf16 or
    compiled training is a setting of the numbers too."""
    runtime = runtime_ran(view)
    return setting_label(result) + where + ("" if runtime == RUNTIME_FP32 else f"; trained with {runtime}")


def export_rows(views: list[RunView], attack: str | None, checkpoint: str, n_per_class: int = 0,
                by_run: bool = False) -> list[ExportRow]:
    """The export's rows: one per configuration, its seeds pooled (replicates set aside and named), or with
    ``by_run`` one per run, in the order given (runs the user named one by one)."""
    rows = []
    for label, members, aside in (run_rows(views) if by_run else seed_groups(views)):
        values: dict[str, list[float]] = {k: [] for k in EXPORT_METRICS}
        settings = []
        for v in members:
            try:
                result = pick_result(v, attack, checkpoint, n_per_class=n_per_class)
                where = ""
            except CompareError as missing:
                if checkpoint != "best":
                    raise
                # a run measured at its last checkpoint alone (a tuning trial: `tune finish` evaluates the
                # best trial's last checkpoint): its result, labelled as such, not an error
                try:
                    result = pick_result(v, attack, "last", n_per_class=n_per_class)
                except CompareError:
                    raise missing from None
                where = " @ last (no best-checkpoint result)"
            settings.append(result_setting(v, result, where))
            s = summarise(result)
            for k in EXPORT_METRICS:
                values[k].append(s[k])
        rows.append(ExportRow(label, [v.run_id for v in members], values, "; ".join(dict.fromkeys(settings)), aside))
    return rows
