"""Class-wise robustness metrics, with the papers' names (torch-free: the app computes them on stored results).

Accuracies are fractions in [0, 1]. CV (Tian et al.'s class-wise variance) is
therefore in fraction units squared, as WAT reports it (0.0250); multiply by
10,000 for Tian et al.'s percent units (250.0). "Average" is the mean over
classes (the class-balanced accuracy).
"""

from __future__ import annotations

import math
from typing import Sequence


def _values(acc: Sequence[float | None]) -> list[float]:
    return [a for a in acc if a is not None]


def average(acc: Sequence[float | None]) -> float:
    vals = _values(acc)
    return sum(vals) / len(vals) if vals else math.nan


def worst(acc: Sequence[float | None]) -> float:
    vals = _values(acc)
    return min(vals) if vals else math.nan


def worst_fraction_mean(acc: Sequence[float | None], fraction: float = 0.2) -> float:
    """Mean of the worst ``fraction`` of classes (CFA's worst-20% on Tiny-ImageNet); at least one class."""
    vals = sorted(_values(acc))
    if not vals:
        return math.nan
    n = max(1, int(round(fraction * len(vals))))
    return sum(vals[:n]) / n


def class_wise_variance(acc: Sequence[float | None]) -> float:
    """CV (Tian et al.): mean over classes of (a_c - mean(a))^2, in fraction units."""
    vals = _values(acc)
    if not vals:
        return math.nan
    mu = sum(vals) / len(vals)
    return sum((a - mu) ** 2 for a in vals) / len(vals)


def max_class_discrepancy(acc: Sequence[float | None]) -> float:
    """MCD (Tian et al.): max(a_c) - min(a_c)."""
    vals = _values(acc)
    return max(vals) - min(vals) if vals else math.nan


def boundary_error(clean_acc: Sequence[float | None], robust_acc: Sequence[float | None]) -> list[float | None]:
    """FRL's boundary error per class: clean-correct but adversarially wrong = clean_acc - robust_acc."""
    return [None if c is None or r is None else c - r for c, r in zip(clean_acc, robust_acc)]


def rho(avg_run: float, worst_run: float, avg_base: float, worst_base: float) -> float:
    """WAT's rho (Eq. 7): relative worst-class gain minus relative average loss against a baseline."""
    return (worst_run - worst_base) / worst_base - (avg_base - avg_run) / avg_base


def summary(acc: Sequence[float | None]) -> dict[str, float]:
    return {"avg": average(acc), "worst": worst(acc), "worst20": worst_fraction_mean(acc, 0.2),
            "cv": class_wise_variance(acc), "mcd": max_class_discrepancy(acc)}
