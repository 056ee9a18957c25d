"""The statistics of judging a method by its seeds: t-intervals, paired tests, power. Plain Python over
``scipy.stats`` (the distributions come from there, never from hand-written tables); no torch, no Textual.

Every function takes accuracies as fractions and returns them in the same units."""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

ALPHA = 0.05  # two-sided
POWER = 0.80
SEEDS_NEEDED_MAX = 1000  # beyond this, "more than 1000": the difference is too small to chase with seeds
PERMUTATION_MAX_N = 10  # the exact sign-flip test enumerates 2^n sign vectors


def t_interval(values: list[float], level: float = 1 - ALPHA) -> tuple[float, float, float]:
    """The mean and its ``level`` Student's t interval (n - 1 degrees of freedom): (mean, lo, hi). One value:
    the interval is (nan, nan); its width is unknown, not zero."""
    from scipy import stats

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.5 + level / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def paired_t_p(diffs: list[float]) -> float:
    """The two-sided p of the paired t-test (the one-sample t-test of the differences against 0). No spread:
    0 if the mean is not 0, else 1. Fewer than two pairs: nan."""
    from scipy import stats

    n = len(diffs)
    if n < 2:
        return math.nan
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(n))
    return float(2 * stats.t.sf(abs(t), n - 1))


def sign_flip_p(diffs: list[float]) -> float:
    """The exact two-sided p of the sign-flip permutation test of the paired differences: under "no effect"
    each difference is as likely negative as positive, so all 2^n sign vectors are equally likely; p is the
    share of them whose mean is at least as far from 0 as the observed one. Its smallest value is 2 / 2^n
    (0.25 at 3 seeds, 0.0625 at 5). n > PERMUTATION_MAX_N: nan (not enumerated)."""
    n = len(diffs)
    if n == 0 or n > PERMUTATION_MAX_N:
        return math.nan
    observed = abs(sum(diffs))
    tol = 1e-12 * max(1.0, observed)
    hits = sum(1 for signs in itertools.product((1, -1), repeat=n)
               if abs(sum(s * d for s, d in zip(signs, diffs))) >= observed - tol)
    return hits / 2 ** n


def power_paired(effect: float, n: int, alpha: float = ALPHA) -> float:
    """The power of the two-sided paired t-test at level ``alpha`` with n pairs, for a true standardised
    effect ``effect`` (mean difference / its standard deviation): noncentral t with n - 1 degrees of freedom."""
    from scipy import stats

    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = effect * math.sqrt(n)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_needed(diffs: list[float], power: float = POWER, alpha: float = ALPHA) -> int | None:
    """The fewest pairs (seeds) at which the paired t-test detects the observed mean difference with
    ``power`` at a two-sided ``alpha``, taking the observed spread as the true one. None when it cannot be
    said: fewer than two pairs, or no difference at all; SEEDS_NEEDED_MAX + 1 when more than that."""
    if len(diffs) < 2:
        return None
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    if mean == 0:
        return None
    if sd == 0:
        return 2
    effect = abs(mean) / sd
    from scipy import stats

    # The z-test's sample size is a lower bound (at any n the t-test's power is below the z-test's): start there.
    z = (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / effect
    for n in range(max(2, math.floor(z * z)), SEEDS_NEEDED_MAX + 1):
        if power_paired(effect, n, alpha) >= power:
            return n
    return SEEDS_NEEDED_MAX + 1


@dataclass
class PairedResult:
    """One metric of one group against its baseline, paired by seed."""

    n: int
    mean: float
    ci95: tuple[float, float]
    p: float  # the paired t-test
    p_permutation: float  # exact sign flips (n <= 10), else nan
    seeds_needed: int | None
    verdict: str
    # the t-test's p adjusted for the other groups paired with the same baseline on this metric (Holm); nan
    # until a comparison of several groups sets it (fairtui.judge.groups.compare_groups)
    p_holm: float = math.nan


def verdict(mean: float, lo: float, hi: float, n: int) -> str:
    """"better" / "worse" when the 95% interval of the mean difference excludes 0 (the paired t-test at 5%),
    else "not distinguishable at n seeds"."""
    if n >= 2 and not math.isnan(lo):
        if lo > 0:
            return "better"
        if hi < 0:
            return "worse"
    return f"not distinguishable at {n} seed{'s' if n != 1 else ''}"


def paired(diffs: list[float]) -> PairedResult:
    mean, lo, hi = t_interval(diffs) if diffs else (math.nan, math.nan, math.nan)
    n = len(diffs)
    return PairedResult(n, mean, (lo, hi), paired_t_p(diffs), sign_flip_p(diffs), seeds_needed(diffs),
                        verdict(mean, lo, hi, n))


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment of m p-values (Holm 1979), in their own order: the k-th smallest becomes
    max over j <= k of min(1, (m - j + 1) p_(j)). It keeps the family-wise error at the level of one test: with
    nine methods each against the same baseline, a p of 0.01 is not alone. NaN stays NaN and is not counted."""
    known = sorted((p, i) for i, p in enumerate(ps) if not math.isnan(p))
    out = [math.nan] * len(ps)
    m, running = len(known), 0.0
    for k, (p, i) in enumerate(known):
        running = max(running, min(1.0, (m - k) * p))
        out[i] = running
    return out


def kendall_tau(a: list, b: list) -> float:
    """Kendall's rank correlation of two orderings of the same items (1: the same order, -1: reversed):
    scipy's tau of the items' positions."""
    from scipy import stats

    if len(a) < 2:
        return math.nan
    pos = {m: i for i, m in enumerate(b)}
    return float(stats.kendalltau(list(range(len(a))), [pos[m] for m in a]).statistic)
