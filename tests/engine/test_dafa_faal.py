"""DAFA and FAAL: the worked examples of docs/reference/methods-dafa-faal.md to 1e-6, the closed form of FAAL's inner
problem against a generic optimiser, and the profiles' checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from engine.contract.method_params import DAFAParams, FAALParams
from engine.methods.dafa import dafa_loss, dafa_weights
from engine.methods.faal import faal_loss, probability_margin, worst_class_distribution

P1 = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
P2 = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])


def close(a, b, tol=1e-6):
    return np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), atol=tol, rtol=0)


# -- DAFA ----------------------------------------------------------------------------------------------
def test_dafa_1_weights_lambdas_and_the_legacy_formula():
    w = dafa_weights(P1, 1.0)
    assert close(w, [0.96, 1.36, 0.68]) and float(w.sum()) == pytest.approx(3.0)
    assert close(dafa_weights(P1, 1.5), [0.94, 1.54, 0.52])
    legacy = dafa_weights(P1, 1.0, formula="legacy_code")
    assert close(legacy, [0.93, 1.36, 0.89]) and float(legacy.sum()) == pytest.approx(3.18)
    # in units of 1/255 at eps 8/255, alpha 2/255: margins, TRADES steps, the code's PGD-AT radius
    assert close(8 * w, [7.68, 10.88, 5.44]) and close(2 * w, [1.92, 2.72, 1.36])
    assert close(torch.minimum(torch.full_like(w, 8.0), 8 * w + 2), [8, 8, 7.44])


def test_dafa_2_ties_by_form():
    assert close(dafa_weights(P2, 1.0, tie_rule="skip"), [1.16, 1.24, 0.60])
    code = dafa_weights(P2, 1.0, tie_rule="subtract")
    assert close(code, [1.06, 1.09, 0.60]) and float(code.sum()) == pytest.approx(2.75)
    assert DAFAParams().resolved().tie_rule == "skip" and DAFAParams(form="code").resolved().tie_rule == "subtract"
    # the PGD-AT code's second, unweighted move: the code form on PGD-AT only
    assert DAFAParams(form="code", base="pgd_at").resolved().pgd_second_step
    assert not DAFAParams(form="code", base="trades").resolved().pgd_second_step
    assert not DAFAParams(base="pgd_at").resolved().pgd_second_step


def test_dafa_3_loss_sums_over_the_batch_divided_by_b():
    w = dafa_weights(P1, 1.0).float()
    y = torch.tensor([1, 1, 2])
    ce, kl = torch.tensor([1.0, 0.5, 0.2]), torch.tensor([0.1, 0.3, 0.05])
    assert float(dafa_loss(ce, w[y], kl, 6.0)) == pytest.approx(1.625333, abs=1e-6)
    assert float(dafa_loss(ce, w[y])) == pytest.approx(0.725333, abs=1e-6)
    # not the normalised weighted mean (sum w CE / sum w), which gives 1.54
    assert float((w[y] * ce).sum() / w[y].sum() + 6 * kl.mean()) == pytest.approx(1.54, abs=1e-6)


def test_dafa_code_pgd_stays_in_the_smaller_of_the_two_balls():
    from engine.methods.dafa import dafa_code_pgd

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    x, y = torch.rand(6, 3, 2, 2), torch.tensor([0, 1, 2, 0, 1, 2])
    eps, alpha = 8 / 255, 2 / 255
    w = torch.tensor([0.5, 1.0, 1.6])[y]
    x_adv = dafa_code_pgd(model, x, y, w * eps, w * alpha, eps, alpha, steps=5)
    radius = torch.minimum(torch.full_like(w, eps), w * eps + alpha)  # min(eps, W eps + alpha)
    moved = (x_adv - x).abs().flatten(1).amax(1)
    assert bool((moved <= radius + 1e-6).all()) and bool((x_adv >= 0).all() and (x_adv <= 1).all())
    assert bool((moved[w > 1] > eps * 0.9).all())  # an enlargement is cancelled, not lost: it reaches eps


# -- FAAL ----------------------------------------------------------------------------------------------
def _logits(q):
    return torch.tensor(q, dtype=torch.float64).log()


FAAL1_Q = [[1 / 4, 1 / 4, 1 / 2], [1 / 2, 1 / 4, 1 / 4], [1 / 4, 1 / 2, 1 / 4], [1 / 8, 3 / 4, 1 / 8],
           [1 / 8, 1 / 8, 3 / 4], [1 / 4, 1 / 4, 1 / 2]]


def test_faal_1_margins_distribution_and_at_loss():
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    z = _logits(FAAL1_Q)
    assert close(probability_margin(z, y), [1 / 4, -1 / 4, -1 / 4, -5 / 8, -5 / 8, -1 / 4])
    r = math.log(32 / 27) / 3
    loss, p, c = faal_loss(z, z, y, 3, FAALParams(radius=r))
    assert close(c, [0, -7 / 8, -7 / 8]) and close(p, [0.5, 0.25, 0.25])
    assert float(loss) == pytest.approx(0.25 * math.log(64 / 3), abs=1e-6)  # 0.765068
    assert float(torch.nn.functional.cross_entropy(z, y)) == pytest.approx(0.673517, abs=1e-6)


def test_faal_2_unequal_counts_code_and_class_mean():
    y = torch.tensor([0, 0, 1, 2])
    z = _logits([[1 / 4, 1 / 2, 1 / 4], [1 / 4, 1 / 2, 1 / 4], [5 / 8, 1 / 8, 1 / 4], [1 / 6, 1 / 6, 2 / 3]])
    r = math.log(2) / 3 - math.log(6 / 5)
    loss, p, c = faal_loss(z, z, y, 3, FAALParams(radius=r))
    assert close(c, [0.5, 0.5, -0.5]) and close(p, [0.4, 0.4, 0.2])
    assert float(loss) == pytest.approx(0.3 * math.log(128) + 0.15 * math.log(1.5), abs=1e-6)  # 1.516429
    _, p_mean, _ = faal_loss(z, z, y, 3, FAALParams(radius=r, class_scores="class_mean"))
    assert close(p_mean, [0.346334, 0.446931, 0.206735])


def test_faal_edge_cases():
    third = [1 / 3] * 3
    assert close(worst_class_distribution(torch.tensor([0.2, 0.2, 0.2]), 0.5), third)
    assert close(worst_class_distribution(torch.tensor([1.0, 0.0, 0.0]), 0.0), third)
    assert close(worst_class_distribution(torch.tensor([1.0, 0.0, 0.0]), 0.5), [0.796247, 0.101876, 0.101876])
    assert close(worst_class_distribution(torch.tensor([1.0, 0.0, 0.0]), 2.0), [0.980649, 0.009676, 0.009676])
    # scale and shift do not move p*; a large K does not overflow the bracket
    c = torch.tensor([0.3, -0.2, 0.9, 0.1], dtype=torch.float64)
    assert close(worst_class_distribution(c, 0.5), worst_class_distribution(7 * c - 3, 0.5), 1e-12)
    big = worst_class_distribution(torch.linspace(-1, 1, 200), 0.5)
    assert torch.isfinite(big).all() and float(big.sum()) == pytest.approx(1.0)


def _kl_u_p(p):
    k = len(p)
    return float(np.sum((1 / k) * np.log((1 / k) / p)))


@pytest.mark.parametrize("k, batch", [(3, 12), (10, 128), (10, 32)])
def test_faal_closed_form_matches_a_generic_optimiser(k, batch):
    from scipy.optimize import minimize_scalar

    rng = np.random.default_rng(k * 1000 + batch)
    for r in (0.01, 0.1, 0.5, 1.0, 2.0):
        y = rng.integers(0, k, batch)
        m = rng.uniform(-1, 1, batch)
        c = np.bincount(y, weights=m, minlength=k)
        p = worst_class_distribution(torch.tensor(c), r).numpy()
        assert abs(_kl_u_p(p) - r) < 1e-9 and abs(p.sum() - 1) < 1e-12 and (p > 0).all()
        # the 1-D convex dual, minimised over mu > max c: D(mu) = mu - e^-r GM(mu - c)
        top = c.max()

        def dual(log_gap):
            d = top + np.exp(log_gap) - c
            return top + np.exp(log_gap) - np.exp(-r) * np.exp(np.log(d).mean())

        best = minimize_scalar(dual, bounds=(-40, 10), method="bounded", options={"xatol": 1e-12})
        d = top + np.exp(best.x) - c
        p_dual = (1 / d) / (1 / d).sum()
        assert np.abs(p - p_dual).max() < 1e-5
        assert abs(float(c @ p) - float(c @ p_dual)) <= 1e-6 * max(1.0, abs(float(c @ p)))
        # and no random feasible point does better
        for _ in range(20):
            q = rng.dirichlet(np.ones(k))
            if _kl_u_p(q) <= r:
                assert float(c @ q) <= float(c @ p) + 1e-9


def test_faal_lr_schedule_and_selection():
    from engine.contract.config import Profile, TrainConfig
    from engine.methods.base import MethodContext, ValResult
    from engine.methods.faal import FAAL

    params = FAALParams(pretrain_epochs=3)
    m = FAAL(params, MethodContext(3, Profile(train=TrainConfig(epochs=5, lr=0.1), method=params),
                                   torch.device("cpu")))
    assert [m.lr_for(e, 0.1) for e in range(1, 6)] == pytest.approx([0.1, 0.1, 0.1, 0.01, 0.001])
    assert [m.fresh_optimizer(e) for e in range(1, 6)] == [False, False, False, True, False]
    assert not m.selectable(3) and m.selectable(4)
    val = ValResult([0.9, 0.8, 0.7], [0.5, 0.2, 0.4])
    worst = FAAL(FAALParams(select="worst"), m.ctx)
    assert worst.selection_score(val) == pytest.approx(0.2)
    assert m.selection_score(val) == pytest.approx(1.1 / 3 + 0.2)


def test_profiles_refuse_what_cannot_run():
    from engine.contract.config import profile_from_table
    from engine.contract.profile_schema import ProfileError

    with pytest.raises(ProfileError, match="method.warmup_epochs"):
        profile_from_table({"train": {"epochs": 5}, "method": {"name": "dafa", "warmup_epochs": 5}}, "p.toml")
    with pytest.raises(ProfileError, match="method.init_from"):
        profile_from_table({"method": {"name": "faal", "init_from": "x", "pretrain_epochs": 2},
                            "train": {"epochs": 4}}, "p.toml")
    with pytest.raises(ProfileError, match="method.tie_rule"):
        profile_from_table({"method": {"name": "dafa", "tie_rule": "sometimes"}}, "p.toml")


def _dafa(**kw):
    from engine.contract.config import AttackConfig, Profile, TrainConfig
    from engine.methods.base import MethodContext
    from engine.methods.dafa import DAFA

    params = DAFAParams(warmup_epochs=2, **kw)
    profile = Profile(attack=AttackConfig(eps=8 / 255, step=2 / 255, steps=2), train=TrainConfig(epochs=4),
                      method=params)
    return DAFA(params, MethodContext(3, profile, torch.device("cpu"), class_names=["a", "b", "c"]))


def test_dafa_gathers_p_in_the_last_warm_up_epoch_and_then_trains_with_w():
    from engine.methods.base import ValResult

    m = _dafa()
    val = ValResult([0.5] * 3, [0.5] * 3)
    m.start_epoch(1, None)
    assert not m.collecting()
    m.start_epoch(2, None)  # tau: the sums start from zero, whatever an earlier (killed) pass left
    m.prob_sums += 99
    m.start_epoch(2, None)
    m.prob_sums += P1.double() * 4  # four samples per class with these mean rows
    m.prob_counts += 4
    assert m.eps_per_class.tolist() == pytest.approx([8 / 255] * 3) and m.method_state()["phase"].startswith("warm")
    m.end_epoch(2, None, [0.5] * 3, val)
    assert close(m.W, [0.96, 1.36, 0.68]) and close(m.measurements()["adv_prob_matrix"], P1)
    m.start_epoch(3, val)
    state = m.method_state()
    assert close(m.eps_per_class, [0.96 * 8 / 255, 1.36 * 8 / 255, 0.68 * 8 / 255])
    assert close(m.weight_nat, [0.96, 1.36, 0.68]) and state["phase"].startswith("dafa")
    assert close(state["step_per_class"], [0.96 * 2 / 255, 1.36 * 2 / 255, 0.68 * 2 / 255])
    assert close(m.step_for(m.eps_per_class), state["step_per_class"])
    fresh = _dafa()  # W and P come back from a checkpoint
    fresh.load_state_dict(m.state_dict())
    assert close(fresh.W, m.W) and close(fresh.eps_per_class, m.eps_per_class)


def test_dafa_weight_at_or_below_zero_fails_naming_the_class_unless_floored():
    from engine.methods.base import ValResult
    from engine.contract.profile_schema import ProfileError

    val = ValResult([0.5] * 3, [0.5] * 3)
    for m in (_dafa(dafa_lambda=3.0), _dafa(dafa_lambda=3.0, weight_floor=0.1)):
        m.start_epoch(2, None)
        m.prob_sums += P1.double()
        m.prob_counts += 1
        if m.p.weight_floor is None:  # lambda 3 on this P gives W = (0.91, 2.17, -0.08)
            m.prob_sums.copy_(torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.05, 0.05, 0.9]]).double())
            with pytest.raises(ProfileError, match=r"class 2 \(c\).*method.weight_floor|method.weight_floor.*class 2 \(c\)"):
                m.end_epoch(2, None, [0.5] * 3, val)
        else:
            m.end_epoch(2, None, [0.5] * 3, val)
            assert float(m.W.min()) >= 0.1
