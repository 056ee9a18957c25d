"""The statistics of judging a method by its seeds: t-intervals, paired tests, planning, anytime-valid stopping. Plain Python over
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
    if statistics.stdev(values) == 0:  # every value the same (accuracies sit on a grid): the t-interval is not
        return mean, math.nan, math.nan  # [m, m], it is undefined; the exact sign-flip test speaks for such data
    half = stats.t.ppf(0.5 + level / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def paired_t_p(diffs: list[float]) -> float:
    """The two-sided p of the paired t-test (the one-sample t-test of the differences against 0). No spread
    (every difference the same, a tie on the accuracies' grid): nan, for t is undefined and a zero spread is not
    infinite evidence; the exact sign-flip test (:func:`sign_flip_p`) speaks there. Fewer than two pairs: nan."""
    from scipy import stats

    n = len(diffs)
    if n < 2:
        return math.nan
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    if sd == 0:
        return math.nan
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
    nc = abs(effect) * math.sqrt(n)  # symmetric in the sign of the effect
    upper, lower = float(stats.nct.sf(crit, df, nc)), float(stats.nct.cdf(-crit, df, nc))
    # scipy's noncentral t is nan far in a tail: the wrong-side tail is then below 1e-16
    return (1.0 if math.isnan(upper) else upper) + (0.0 if math.isnan(lower) else lower)


def detectable_difference(sd: float, n: int, power: float = POWER, alpha: float = ALPHA) -> float | None:
    """The smallest true mean difference the two-sided paired t-test at ``alpha`` detects with ``power`` at n pairs,
    taking ``sd`` (the observed standard deviation of the differences) as the true one: what the seeds at hand can
    see, a statement about the design, not about the observed difference (which post-hoc power would restate as
    its p-value). None below two pairs or with no spread measured."""
    if n < 2 or not sd > 0 or math.isnan(sd):
        return None
    from scipy import optimize

    # power_paired rises with the standardised effect from alpha at 0: bracket the root by doubling (scipy's
    # noncentral t is nan far out, so the bracket stays near the root)
    hi = 0.5
    while power_paired(hi, n, alpha) < power:
        hi *= 2
    effect = optimize.brentq(lambda e: power_paired(e, n, alpha) - power, 0.0, hi, xtol=1e-12)
    return effect * sd


def seeds_for_effect(effect: float, sd: float, power: float = POWER, alpha: float = ALPHA) -> int | None:
    """The fewest pairs (seeds) at which the two-sided paired t-test at ``alpha`` detects a true mean difference of
    ``effect`` (named in advance by the user, not the observed one) with ``power``, taking ``sd`` as the spread of
    the differences. None when it cannot be said (no spread measured, or no effect named); 2 with no spread;
    SEEDS_NEEDED_MAX + 1 when more than that."""
    if not effect or math.isnan(sd) or sd < 0:
        return None
    if sd == 0:
        return 2
    from scipy import stats

    standardised = abs(effect) / sd
    # The z-test's sample size is a lower bound (at any n the t-test's power is below the z-test's): start there.
    z = (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / standardised
    for n in range(max(2, math.floor(z * z)), SEEDS_NEEDED_MAX + 1):
        if power_paired(standardised, n, alpha) >= power:
            return n
    return SEEDS_NEEDED_MAX + 1


# -- adding seeds until the answer is known ---------------------------------------------------------------------
#
# The safe t-test (Grünwald, de Heide and Koolen, "Safe testing", JRSS B 2024; Pérez-Ortiz, Lardy, de Heide and
# Grünwald, "E-statistics, group invariance and anytime-valid testing", Annals of Statistics 2024): the Bayes factor
# of the one-sample t-test with the right-Haar prior on the standard deviation and a normal prior N(0, g) on the
# standardised effect delta = mu / sigma (Rouder, Speckman, Sun, Morey and Iverson 2009, eq. 6 at a fixed g) is
#
#     E_n = (1 + n g)^(-1/2) * [(1 + t^2 / nu) / (1 + t^2 / (nu (1 + n g)))]^((nu + 1) / 2),  nu = n - 1,
#
# with t the paired t statistic of the first n differences. Under "no effect" (normal differences of any spread)
# E_2, E_3, ... is a test martingale, so by Ville's inequality P(E_n >= 1 / alpha at any n) <= alpha: a user may look
# after every seed and stop at the first E_n >= 1 / alpha, and the false-positive rate stays at most alpha whatever
# the stopping rule. The test assumes roughly normal differences, as the t-test does (STATS.md: at n <= 10 bounded-
# mean methods need far more seeds). tests/fairtui/test_sequential.py simulates both its error rate and the seeds it
# needs.

SEQUENTIAL_G = 4.0  # the prior N(0, 4) on delta: standardised effects up to about 4 (DAFA against TRADES: about 2.8)


def safe_t_e_value(diffs: list[float], g: float = SEQUENTIAL_G) -> float:
    """E_n of the safe t-test (above) for the paired differences; nan below two, 1 for all zeros. Every difference
    the same and not zero (a tie on the accuracies' grid: the worst class of 200 images moves in steps of 0.5
    points) gives the formula's limit as the spread goes to 0, (1 + n g)^((n - 1) / 2): 3 at 2 seeds, 13 at 3,
    70 at 4 (g = 4), never infinity, so no tie decides below 4 seeds."""
    n = len(diffs)
    if n < 2:
        return math.nan
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    if sd == 0:
        return 1.0 if mean == 0 else (1 + n * g) ** ((n - 1) / 2)
    return _e_of_t(mean / (sd / math.sqrt(n)), n, g)


def _e_of_t(t: float, n: int, g: float) -> float:
    nu = n - 1
    return (1 + n * g) ** -0.5 * ((1 + t * t / nu) / (1 + t * t / (nu * (1 + n * g)))) ** ((nu + 1) / 2)


def anytime_interval(diffs: list[float], alpha: float = ALPHA, g: float = SEQUENTIAL_G) -> tuple[float, float]:
    """The (1 - alpha) confidence sequence of the mean difference at n = len(diffs): every mu0 the safe t-test of
    d - mu0 does not reject. E_n grows with |t|, so it is mean -+ t* sd / sqrt(n) with E_n(t*) = 1 / alpha:
    t*^2 = nu (r - 1) / (1 - r / (1 + n g)), r = (sqrt(1 + n g) / alpha)^(2 / (nu + 1)). It holds at every n at
    once (a user may stop at any seed); it is wider than the fixed-n t interval, the price of looking. Unbounded
    (-inf, inf) while no t reaches 1 / alpha (g = 4: below 4 seeds)."""
    n = len(diffs)
    if n < 2:
        return -math.inf, math.inf
    nu, mean, sd = n - 1, statistics.fmean(diffs), statistics.stdev(diffs)
    r = (math.sqrt(1 + n * g) / alpha) ** (2 / (nu + 1))
    if r >= 1 + n * g:
        return -math.inf, math.inf
    half = math.sqrt(nu * (r - 1) / (1 - r / (1 + n * g))) * sd / math.sqrt(n)
    return mean - half, mean + half


@dataclass
class Sequential:
    """Where an anytime-valid look at the differences so far stands."""

    n: int
    e_value: float
    interval: tuple[float, float]
    decided: bool  # E_n >= 1 / alpha: "better" or "worse" may be said now, with the error rate kept
    verdict: str
    alpha: float = ALPHA  # its level: a family of m methods judges each at ALPHA / m (fairtui.campaign.family)

    def to_json(self) -> dict:
        finite = lambda x: None if math.isnan(x) or math.isinf(x) else x  # noqa: E731
        return {"test": "safe t-test (anytime-valid), prior N(0, %g) on the standardised effect" % SEQUENTIAL_G,
                "n": self.n, "e_value": finite(self.e_value), "threshold": 1 / self.alpha,
                "interval": [finite(self.interval[0]), finite(self.interval[1])], "decided": self.decided,
                "verdict": self.verdict}


def sequential(diffs: list[float], max_seeds: int | None = None, alpha: float = ALPHA) -> Sequential:
    """The anytime-valid look after the seeds so far: "better" / "worse" once E_n >= 1 / alpha; "not decided at
    n seeds" before; "not distinguishable at n seeds (the most asked for)" at ``max_seeds`` without a decision."""
    n, e = len(diffs), safe_t_e_value(diffs)
    lo, hi = anytime_interval(diffs, alpha)
    decided = n >= 2 and e >= 1 / alpha
    if decided:
        word = "better" if statistics.fmean(diffs) > 0 else "worse"
    elif max_seeds is not None and n >= max_seeds:
        word = f"not distinguishable at {n} seeds (the most asked for)"
    else:
        word = f"not decided at {n} seed{'s' if n != 1 else ''}"
    return Sequential(n, e, (lo, hi), decided, word, alpha)


@dataclass
class PairedResult:
    """One metric of one group against its baseline, paired by seed."""

    n: int
    mean: float
    ci95: tuple[float, float]
    p: float  # the paired t-test
    p_permutation: float  # exact sign flips (n <= 10), else nan
    detectable: float | None  # the smallest true difference these seeds detect with 80% power (the observed spread)
    seeds_for_effect: int | None  # the seeds that detect ``effect`` with 80% power
    effect: float  # the difference the user named in advance (--effect), in fractions
    verdict: str
    # the t-test's p adjusted for the other groups paired with the same baseline on this metric (Holm); nan
    # until a comparison of several groups sets it (fairtui.judge.groups.compare_groups)
    p_holm: float = math.nan
    # the standardised effect d_z (mean / sd of the differences) and its 95% interval
    dz: tuple[float, float, float] = (math.nan, math.nan, math.nan)

    @property
    def decision(self) -> str | None:
        return decision(self.verdict)

    @property
    def p_family(self) -> float:
        """The p this pairing brings to its Holm family: the t-test's, or the exact test's where the differences
        have no spread (no t-test)."""
        return self.p_permutation if math.isnan(self.p) and self.n >= 2 else self.p


def exact_floor(n: int) -> float:
    """The smallest two-sided p the exact sign-flip test can give at n pairs: 2 / 2^n (0.0625 at 5 seeds)."""
    return 2 / 2 ** n


def verdict(mean: float, lo: float, hi: float, n: int, p_exact: float = math.nan) -> str:
    """"better" / "worse" when the 95% t-interval of the mean difference excludes 0 (the paired t-test at 5%),
    else "not distinguishable at n seeds". The verdict names what it rests on where that matters: below 6 seeds the
    exact sign-flip test cannot reach 5% (its floor 2 / 2^n), so a "better" there rests on the t-test's normality
    alone and says so. With no spread (every difference the same) there is no t-test: the exact test decides."""
    seeds = f"{n} seed{'s' if n != 1 else ''}"
    if n >= 2 and not math.isnan(lo):
        if lo > 0 or hi < 0:
            word = "better" if lo > 0 else "worse"
            if exact_floor(n) > ALPHA:
                return f"{word} (t-test; the exact test cannot go below {exact_floor(n):.3g} at {seeds})"
            return word
    elif n >= 2 and math.isnan(lo) and not math.isnan(mean) and mean != 0:  # no spread: no t-test
        if not math.isnan(p_exact) and p_exact < ALPHA:
            return f"{'better' if mean > 0 else 'worse'} (exact sign-flip test; every difference the same)"
        return f"not distinguishable at {seeds} (every difference the same: no t-test; exact p {p_exact:.3g})"
    return f"not distinguishable at {seeds}"


def decision(text: str) -> str | None:
    """"better" or "worse" from a verdict's text, None when it decides nothing."""
    word = text.split(" ", 1)[0]
    return word if word in ("better", "worse") else None


def cohen_dz(diffs: list[float], level: float = 1 - ALPHA) -> tuple[float, float, float]:
    """The standardised paired effect d_z = mean / sd of the differences and its ``level`` interval, by inverting the
    noncentral t of t = d_z sqrt(n) on n - 1 degrees of freedom (the exact interval for normal differences: Cumming
    and Finch 2001). (nan, nan, nan) below two pairs or with no spread."""
    n = len(diffs)
    if n < 2 or statistics.stdev(diffs) == 0:
        return math.nan, math.nan, math.nan
    from scipy import optimize, stats

    dz = statistics.fmean(diffs) / statistics.stdev(diffs)
    t, df, root_n = dz * math.sqrt(n), n - 1, math.sqrt(n)

    def cdf(nc: float) -> float:  # P(T <= t) at noncentrality nc, falling in nc; scipy's is nan far in a tail
        value = float(stats.nct.cdf(t, df, nc))
        return value if not math.isnan(value) else (1.0 if nc < t else 0.0)

    def nc_for(q: float) -> float:  # the noncentrality at which P(T <= t) = q
        f = lambda nc: cdf(nc) - q  # noqa: E731
        lo, hi = t - 10.0, t + 10.0
        while f(lo) < 0:
            lo -= 10.0
        while f(hi) > 0:
            hi += 10.0
        return optimize.brentq(f, lo, hi, xtol=1e-12)

    tail = (1 - level) / 2
    return dz, nc_for(1 - tail) / root_n, nc_for(tail) / root_n


EFFECT = 0.02  # the difference to plan for when the user names none: 2 points of accuracy


def paired(diffs: list[float], effect: float = EFFECT) -> PairedResult:
    """The fixed-n statistics of the paired differences, with the planning numbers: the difference these seeds
    detect, and the seeds for ``effect`` (both from the observed spread of the differences)."""
    mean, lo, hi = t_interval(diffs) if diffs else (math.nan, math.nan, math.nan)
    n = len(diffs)
    sd = statistics.stdev(diffs) if n >= 2 else math.nan
    exact = sign_flip_p(diffs)
    return PairedResult(n, mean, (lo, hi), paired_t_p(diffs), exact, detectable_difference(sd, n),
                        seeds_for_effect(effect, sd), effect, verdict(mean, lo, hi, n, exact), dz=cohen_dz(diffs))


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
