"""Adding seeds until the answer is known (fairtui.judge.stats.sequential): the safe t-test's e-value and its
confidence sequence against hand-computed cases, and by simulation its error rate under no effect (at most 5% with a
look after every seed) against the naive "t-test after every seed" (well above 5%), and the seeds it needs at DAFA's
committed effect against TRADES. The simulation's numbers are quoted in docs/judging.md."""

from __future__ import annotations

import math
import random

import pytest

from fairtui.judge import stats

# DAFA against TRADES at CPU scale (STATS.md; experiments/results/cifar10-cpu): worst class +4.7 points, the paired
# differences' standard deviation about 1.7 points over five seeds
DAFA_EFFECT, SPREAD = 0.047, 0.017
SEQUENCES, MAX_SEEDS = 2000, 10


def test_e_value_is_the_closed_form_by_hand():
    # diffs 2, 4, 6 points: t = sqrt 12, nu = 2, g = 4: E = 13^(-1/2) (7 / (1 + 12 / 26))^(3/2) = (91 / 19)^(3/2) / sqrt 13
    assert stats.safe_t_e_value([0.02, 0.04, 0.06]) == pytest.approx((91 / 19) ** 1.5 / math.sqrt(13), rel=1e-12)
    assert (91 / 19) ** 1.5 / math.sqrt(13) == pytest.approx(2.9071, abs=1e-4)
    # symmetric in the sign; does not see the scale (right-Haar prior on the spread)
    assert stats.safe_t_e_value([-0.02, -0.04, -0.06]) == stats.safe_t_e_value([0.02, 0.04, 0.06])
    assert stats.safe_t_e_value([2.0, 4.0, 6.0]) == pytest.approx(stats.safe_t_e_value([0.02, 0.04, 0.06]))
    # t = 0 at n pairs: E = (1 + n g)^(-1/2) < 1 (evidence for no effect)
    assert stats.safe_t_e_value([-0.01, 0.0, 0.01]) == pytest.approx(13 ** -0.5)
    assert math.isnan(stats.safe_t_e_value([0.01]))
    assert stats.safe_t_e_value([0.01, 0.01]) == math.inf and stats.safe_t_e_value([0.0, 0.0]) == 1.0


def test_the_confidence_sequence_is_the_inverted_test():
    diffs = [0.05, 0.03, 0.06, 0.045, 0.05]
    lo, hi = stats.anytime_interval(diffs)
    mean = sum(diffs) / len(diffs)
    assert lo < mean < hi and mean - lo == pytest.approx(hi - mean)
    # at either end the test of d - mu0 stands exactly at 1 / alpha = 20; inside it is below, outside above
    for edge in (lo, hi):
        assert stats.safe_t_e_value([d - edge for d in diffs]) == pytest.approx(20.0, rel=1e-9)
    assert stats.safe_t_e_value([d - mean for d in diffs]) < 20 < stats.safe_t_e_value([d - (hi + 0.001) for d in diffs])
    # it is wider than the fixed-n t interval: the price of looking after every seed
    t_lo, t_hi = stats.t_interval(diffs)[1:]
    assert lo < t_lo and t_hi < hi
    # with g = 4 no t reaches 20 below four pairs: the interval is unbounded there, and no decision is possible
    assert stats.anytime_interval([0.05, 0.051, 0.052]) == (-math.inf, math.inf)
    assert not stats.sequential([0.05, 0.051, 0.052]).decided


def test_sequential_verdicts():
    better = stats.sequential([0.05, 0.03, 0.06, 0.045, 0.05])
    assert better.decided and better.verdict == "better" and better.e_value >= 20 and better.interval[0] > 0
    worse = stats.sequential([-0.05, -0.03, -0.06, -0.045, -0.05])
    assert worse.decided and worse.verdict == "worse"
    assert stats.sequential([0.01, -0.02, 0.0]).verdict == "not decided at 3 seeds"
    capped = stats.sequential([0.01, -0.02, 0.0, 0.01], max_seeds=4)
    assert not capped.decided and capped.verdict == "not distinguishable at 4 seeds (the most asked for)"
    assert capped.to_json()["interval"] == [None, None] or capped.to_json()["interval"][0] < 0


def simulate(mean: float, rule, seed: int) -> tuple[float, float]:
    """The share of SEQUENCES sequences of normal differences (``mean``, SPREAD) that ``rule`` (diffs -> stop and
    reject?) rejects within MAX_SEEDS seeds, looking after every seed from the second, and the mean seeds at a rejection."""
    rng = random.Random(seed)
    rejected, at = 0, []
    for _ in range(SEQUENCES):
        diffs = [rng.gauss(mean, SPREAD) for _ in range(MAX_SEEDS)]
        for n in range(2, MAX_SEEDS + 1):
            if rule(diffs[:n]):
                rejected += 1
                at.append(n)
                break
    return rejected / SEQUENCES, (sum(at) / len(at) if at else math.nan)


def safe(diffs):
    return stats.sequential(diffs, MAX_SEEDS).decided


def naive(diffs):
    """What users do: a paired t-test after every seed from the third, stopping at the first p < 0.05."""
    return len(diffs) >= 3 and stats.paired_t_p(diffs) < 0.05


def test_by_simulation_the_safe_test_keeps_its_error_rate_where_looking_after_every_seed_does_not():
    safe_rate, _ = simulate(0.0, safe, seed=1)
    naive_rate, _ = simulate(0.0, naive, seed=1)
    print(f"\nno effect, {SEQUENCES} sequences up to {MAX_SEEDS} seeds: safe t-test {safe_rate:.3f}, "
          f"t-test after every seed {naive_rate:.3f}")
    # Ville's inequality bounds the safe test's rate by 5%; the binomial's standard error at 5% over 2,000 is 0.5%
    assert safe_rate <= 0.05
    assert naive_rate > 0.08  # about 0.17: more than three times the level it claims


def test_by_simulation_the_safe_test_decides_dafa_against_trades_within_ten_seeds():
    power, mean_seeds = simulate(DAFA_EFFECT, safe, seed=2)
    print(f"\nDAFA's effect (+4.7, sd 1.7): decided within {MAX_SEEDS} seeds in {power:.3f}, "
          f"mean seeds to decide {mean_seeds:.2f}")
    assert power >= 0.80
    assert 4 <= mean_seeds <= 7  # never below 4 (g = 4); about 5
