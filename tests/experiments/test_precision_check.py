"""The CPU precision check (#57): its verdict on hand-computed numbers, and the docs' block is what the committed
runs give."""

from experiments.precision_check import KEY, MARKS, markdown, within_spread
from tests.conftest import ROOT


def test_within_the_spread_on_hand_computed_numbers():
    # fp32 seeds 0.30, 0.34, 0.32 (variance 0.0004), bf16 0.31, 0.31, 0.34 (variance 0.0003): pooled
    # variance 0.00035, spread sqrt(0.00035) = 0.018708
    spread, within = within_spread([0.30, 0.34, 0.32], [0.31, 0.31, 0.34], -0.0, (-0.05, 0.05))
    assert abs(spread - 0.00035 ** 0.5) < 1e-12 and within
    assert not within_spread([0.30, 0.34, 0.32], [0.31, 0.31, 0.34], 0.019, (-0.01, 0.05))[1]  # over the spread
    assert within_spread([0.30, 0.34, 0.32], [0.31, 0.31, 0.34], 0.018, (-0.01, 0.05))[1]
    assert not within_spread([0.30, 0.34, 0.32], [0.31, 0.31, 0.34], 0.01, (0.001, 0.02))[1]  # told apart


def test_the_docs_block_is_what_the_committed_runs_give():
    docs = (ROOT / "experiments" / "results" / "cifar10-cpu-precision" / "README.md").read_text()
    start, end = (mark.format(KEY) for mark in MARKS)
    block = docs.split(start + "\n", 1)[1].split("\n" + end, 1)[0]
    assert block == markdown(), ("regenerate: python experiments/precision_check.py --write-docs "
                                 "experiments/results/cifar10-cpu-precision/README.md")
