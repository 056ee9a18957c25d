"""Class-wise metrics against hand computations and the papers' published numbers."""

import math

import pytest
import torch

from engine.runtime import metrics
from engine.evaluation.evaluate import confusion_matrix, per_class_result


def test_rho_reproduces_wat_table_1():
    # WAT Table 1, PGD-100: TRADES 51.69 / 25.2 (avg / worst) vs WAT 49.13 / 36.6 -> rho = 0.403
    assert metrics.rho(49.13, 36.6, 51.69, 25.2) == pytest.approx(0.403, abs=5e-4)


def test_cv_and_mcd_by_hand():
    acc = [0.9, 0.5, 0.7]
    # mean 0.7; squared deviations 0.04, 0.04, 0 -> CV = 0.08 / 3
    assert metrics.class_wise_variance(acc) == pytest.approx(0.08 / 3)
    assert metrics.max_class_discrepancy(acc) == pytest.approx(0.4)
    assert metrics.worst(acc) == 0.5 and metrics.average(acc) == pytest.approx(0.7)


def test_worst_fraction_mean():
    acc = [0.1, 0.9, 0.8, 0.2, 0.7, 0.6, 0.5, 0.4, 0.3, 1.0]
    assert metrics.worst_fraction_mean(acc, 0.2) == pytest.approx(0.15)  # the worst 2 of 10
    assert metrics.worst_fraction_mean([0.3, 0.9], 0.2) == pytest.approx(0.3)  # at least one class


def test_counter_matches_a_python_loop():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 7, (500,), generator=g)
    correct = torch.rand(500, generator=g) < 0.6
    counter = metrics.ClassCounter(7)
    counter.add(y[:200], correct[:200])
    counter.add(y[200:], correct[200:])
    for k, acc in enumerate(counter.per_class()):
        mask = y == k
        assert acc == pytest.approx(correct[mask].float().mean().item())


def test_per_class_result_and_confusion_matrix():
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    clean = torch.tensor([0, 0, 1, 0, 2, 2])
    adv = torch.tensor([0, 1, 0, 0, 2, 1])
    r = per_class_result(y, clean, adv, 3)
    assert r["clean_acc_per_class"] == [1.0, 0.5, 1.0]
    assert r["robust_acc_per_class"] == [0.5, 0.0, 0.5]
    assert r["boundary_error_per_class"] == [0.5, 0.5, 0.5]
    assert r["worst_robust"] == 0.0 and r["mcd"] == 0.5
    assert confusion_matrix(y, adv, 3) == [[1, 1, 0], [2, 0, 0], [0, 1, 1]]


def test_empty_class_is_none_not_zero():
    counter = metrics.ClassCounter(3)
    counter.add(torch.tensor([0, 1]), torch.tensor([True, False]))
    assert counter.per_class() == [1.0, 0.0, None]
    assert metrics.average(counter.per_class()) == 0.5
    assert math.isnan(metrics.average([None]))


def test_cvc_by_hand():
    from engine.evaluation.evaluate import class_means, confidence_variance

    # softmax([0, 0]) = [0.5, 0.5]: variance 0; softmax([ln 3, 0]) = [0.75, 0.25]: variance 0.0625
    logits = torch.tensor([[0.0, 0.0], [1.0986123, 0.0], [1.0986123, 0.0]])
    var = confidence_variance(logits)
    assert var.tolist() == pytest.approx([0.0, 0.0625, 0.0625], abs=1e-6)
    y = torch.tensor([0, 0, 1])
    assert class_means(y, var, 3) == pytest.approx([0.03125, 0.0625, None])
