"""A run's numbers as flat named scalars, for the dashboards that mirror runs (TensorBoard's export in
the app, W&B from the engine): one naming, one rule, whichever writes them. Torch-free.

Names: ``val/robust_per_class/<k>_<class>`` (the index keeps a dashboard's order the class order),
``val/clean_per_class/...``, ``val/robust_avg|worst|worst20|cv|mcd``, ``val/clean_avg``;
``train/loss|clean_acc|robust_acc|lr|epoch_time_s``; ``state/<key>/<k>_<class>`` for the method's
class-wise state (WAT's K + 1 with ``overall`` first) and ``state/<key>`` for its single numbers and flags;
a test result under ``<split>/<checkpoint>/<attack>/``: ``robust_per_class/...``, ``clean_per_class/...``,
``avg_robust``, ``worst_robust``, ``worst20_robust``, ``avg_clean``, ``cv``, ``mcd`` (a clean result: its
clean numbers only).
"""

from __future__ import annotations

import math
import re

from engine.contract import metrics


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def class_tags(names: list[str]) -> list[str]:
    """``03_cat``: the index keeps a dashboard's order the class order."""
    width = len(str(max(len(names) - 1, 0)))
    return [f"{i:0{width}d}_{safe_name(n)}" for i, n in enumerate(names)]


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(float(v))


def _only_numbers(values: dict) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if _finite(v)}


def state_scalars(state: dict, tags: list[str]) -> dict[str, float]:
    """A method_state as scalars: per-class lists (K, or K + 1 with 'overall' first for WAT) and single
    numbers or flags; matrices (DAFA's P) and text are not scalars and stay in the run folder."""
    out: dict[str, float] = {}
    k = len(tags)
    for key, value in state.items():
        if isinstance(value, (int, float)):  # a bool too (CFA's fawa_accepted): 0 or 1
            out[f"state/{key}"] = value
        elif isinstance(value, list) and len(value) in (k, k + 1) and \
                all(v is None or isinstance(v, (int, float)) for v in value):
            labels = tags if len(value) == k else ["overall"] + tags
            out.update({f"state/{key}/{t}": v for t, v in zip(labels, value) if v is not None})
    return _only_numbers(out)


def epoch_scalars(event: dict, names: list[str]) -> dict[str, float]:
    """An `epoch_end` event's numbers."""
    tags = class_tags(names)
    values: dict[str, float] = {}
    val, train = event.get("val") or {}, event.get("train") or {}
    for kind in ("robust", "clean"):
        per_class = val.get(f"{kind}_acc_per_class") or []
        values.update({f"val/{kind}_per_class/{t}": v for t, v in zip(tags, per_class) if v is not None})
    if val.get("robust_acc_per_class"):
        s = metrics.summary(val["robust_acc_per_class"])
        values.update({f"val/robust_{k}": s[k] for k in ("avg", "worst", "worst20", "cv", "mcd")})
    if val.get("clean_acc_per_class"):
        values["val/clean_avg"] = metrics.average(val["clean_acc_per_class"])
    for key in ("loss", "clean_acc", "robust_acc"):
        values[f"train/{key}"] = train.get(key)
    values["train/lr"], values["train/epoch_time_s"] = event.get("lr"), event.get("time_s")
    values.update(state_scalars(event.get("method_state") or {}, tags))
    return _only_numbers(values)


def result_prefix(event: dict) -> str:
    return f"{event.get('split', 'test')}/{safe_name(str(event.get('checkpoint')))}/{safe_name(str(event.get('attack')))}"


def result_scalars(event: dict, names: list[str]) -> dict[str, float]:
    """An `eval_result`'s numbers under ``<split>/<checkpoint>/<attack>/``."""
    tags, prefix = class_tags(names), result_prefix(event)
    values: dict[str, float] = {}
    clean = event.get("clean_acc_per_class") or []
    values.update({f"{prefix}/clean_per_class/{t}": v for t, v in zip(tags, clean) if v is not None})
    if clean:
        values[f"{prefix}/avg_clean"] = metrics.average(clean)
    robust = event.get("robust_acc_per_class") or []
    if event.get("attack") != "clean" and robust:  # no attack: only the clean numbers mean something
        values.update({f"{prefix}/robust_per_class/{t}": v for t, v in zip(tags, robust) if v is not None})
        s = metrics.summary(robust)
        values.update({f"{prefix}/avg_robust": s["avg"], f"{prefix}/worst_robust": s["worst"],
                       f"{prefix}/worst20_robust": s["worst20"], f"{prefix}/cv": s["cv"], f"{prefix}/mcd": s["mcd"]})
    return _only_numbers(values)
