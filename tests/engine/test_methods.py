"""Every update rule against numbers computed by hand from its paper's equation."""

import hashlib
from pathlib import Path

import pytest
import torch
from torch import nn

from engine.contract.config import Profile, AttackConfig
from engine.contract.method_params import CFAParams, FRLParams, TRADESParams, WATParams
from engine.methods import METHODS
from engine.methods.base import MethodContext, ValResult, weighted_mean
from engine.methods.cfa import CFA
from engine.methods.frl import FRL, class_weights, project_multipliers
from engine.methods.standard import TRADES
from engine.methods.wat import WAT, hedge_weights


def ctx(k: int, params, eps: float = 0.1) -> MethodContext:
    profile = Profile(attack=AttackConfig(eps=eps, step=eps / 4, steps=2), method=params)
    return MethodContext(k, profile, torch.device("cpu"))


class FixedLogits(nn.Module):
    """Logits that do not depend on the input (so KL(f(x) || f(x')) = 0 and CE is known by hand)."""

    def __init__(self, logits):
        super().__init__()
        self.b = nn.Parameter(torch.tensor(logits))

    def forward(self, x):
        return self.b.expand(len(x), -1) + 0 * x.flatten(1).sum(1, keepdim=True)


def test_registries_agree():
    from engine.contract.method_registry import METHOD_PARAMS

    assert set(METHODS) == set(METHOD_PARAMS)


# -- FRL (Xu et al. 2021, Algorithm 1 and Eq. 11) ------------------------------------------------------

VAL = ValResult(clean_acc_per_class=[0.9, 0.6, 0.75], robust_acc_per_class=[0.6, 0.2, 0.45])
# clean_err = [0.1, 0.4, 0.25] (mean 0.25), bndy_err = [0.3, 0.4, 0.3] (mean 1/3)
# gamma_nat = [-0.2, 0.1, -0.05]; gamma_bndy = [-1/12, 1/60, -1/12]  (tau1 = tau2 = 0.05)


def frl(**kw) -> FRL:
    params = FRLParams(alpha1=0.1, alpha2=0.1, alpha_margin=0.1, **kw)
    return FRL(params, ctx(3, params))


def test_frl_reweight_multipliers_and_weights():
    m = frl(variant="reweight")
    m.start_epoch(1, VAL)
    assert m.clean_err.tolist() == pytest.approx([0.1, 0.4, 0.25])
    assert m.bndy_err.tolist() == pytest.approx([0.3, 0.4, 0.3])
    assert m.lambda_nat.tolist() == pytest.approx([0.0, 0.01, 0.0])  # [-0.02, 0.01, -0.005] clamped at 0
    assert m.lambda_bndy.tolist() == pytest.approx([0.0, 0.1 / 60, 0.0])
    assert m.weight_nat.tolist() == pytest.approx([0.33, 0.34, 0.33], abs=1e-6)
    assert m.weight_bndy.tolist() == pytest.approx([1 / 3 - 1 / 1800, 1 / 3 + 2 / 1800, 1 / 3 - 1 / 1800], abs=1e-6)
    assert m.eps_per_class.tolist() == pytest.approx([0.1] * 3)  # Reweight leaves the margins alone
    m.start_epoch(2, VAL)  # the multipliers accumulate
    assert m.lambda_nat.tolist() == pytest.approx([0.0, 0.02, 0.0])


def test_frl_projection_onto_the_capped_simplex():
    lam = project_multipliers(torch.tensor([0.4, 0.3, -0.1], dtype=torch.float64), cap=0.5)
    assert lam.tolist() == pytest.approx([0.4 * 0.5 / 0.7, 0.3 * 0.5 / 0.7, 0.0])
    assert class_weights(torch.zeros(4)).tolist() == [0.25] * 4
    assert float(class_weights(torch.tensor([0.1, 0.0, 0.3, 0.0])).sum()) == pytest.approx(1.0)


def test_frl_remargin_paper_and_code_forms():
    paper = frl(variant="remargin")
    paper.start_epoch(1, VAL)
    # lambda_margin = 0.1 * gamma_bndy = [-1/120, 1/600, -1/120]; floor 1 keeps eps, class 1 grows
    assert paper.lambda_margin.tolist() == pytest.approx([-1 / 120, 1 / 600, -1 / 120])
    assert paper.eps_per_class.tolist() == pytest.approx([0.1, 0.1 * 1.001668056, 0.1], rel=1e-6)
    assert paper.weight_nat.tolist() == [1.0, 1.0, 1.0]  # Remargin alone keeps the weights uniform
    code = frl(variant="remargin", margin_form="code")
    code.start_epoch(1, VAL)
    # eps * clamp(exp(2 lambda), 0.98, 3): exp(-1/60) = 0.98347 stays above the 0.98 floor
    assert code.eps_per_class.tolist() == pytest.approx([0.1 * 0.983471454, 0.1 * 1.003338895, 0.1 * 0.983471454],
                                                        rel=1e-6)
    assert code.step_for(code.eps_per_class) == pytest.approx(0.1 * 1.003338895 / 4, rel=1e-6)


def test_frl_margin_cap_is_16_over_255():
    m = frl(variant="remargin")
    m.lambda_margin = torch.tensor([5.0, 0.0, -5.0], dtype=torch.float64)
    assert m.margins().tolist() == pytest.approx([0.2, 0.1, 0.1])  # cap 2 * eps, floor eps


def test_frl_pretraining_then_fine_tuning_schedule():
    m = frl(pretrain_epochs=3, finetune_lr=1e-3, decay_every=2, decay_factor=0.1)
    assert [m.lr_for(e, 0.1) for e in (1, 3)] == [0.1, 0.1]  # pre-training follows the profile
    assert [m.lr_for(e, 0.1) for e in (4, 5, 6, 8)] == pytest.approx([1e-3, 1e-3, 1e-4, 1e-5])
    m.start_epoch(2, VAL)
    assert m.lambda_nat.tolist() == [0.0, 0.0, 0.0]  # no multiplier updates while pre-training
    m.start_epoch(6, VAL)  # alphas decayed by 0.1 too: lambda_nat[1] = 0.1 * 0.1 * 0.1
    assert m.lambda_nat.tolist() == pytest.approx([0.0, 0.001, 0.0])


def test_frl_baseline_reweight_raises_the_worst_robust_class():
    m = frl(variant="baseline_reweight")
    m.start_epoch(1, VAL)
    # robust_err = [0.4, 0.8, 0.55], mean 0.5833; only class 1 moves: 0.1 * (0.8 - 0.58333)
    assert m.lambda_nat.tolist() == pytest.approx([0.0, 0.0216667, 0.0], rel=1e-5)
    assert int(m.weight_nat.argmax()) == 1 and torch.equal(m.weight_nat, m.weight_bndy)


def test_weighted_mean_is_frls_normalised_loss():
    assert float(weighted_mean(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, 0.25, 0.25]))) == 1.75


# -- CFA (Wei et al. 2023, Eq. 6, CCR, FAWA) --------------------------------------------------------------

def cfa(**kw) -> CFA:
    params = CFAParams(**kw).resolved()
    return CFA(params, ctx(3, params))


def test_cfa_ccm_and_ccr_by_hand():
    m = cfa(base="trades", lambda1=0.5, lambda2=0.5, beta=6.0, calibration_start_epoch=2, fawa=False)
    m.end_epoch(1, nn.Linear(1, 1), [0.8, 0.3, 0.5], VAL)
    assert m.eps_per_class.tolist() == pytest.approx([0.13, 0.08, 0.10])  # (0.5 + t_k) * 0.1
    assert m.beta_per_class.tolist() == pytest.approx([7.8, 4.8, 6.0])  # (0.5 + t_k) * 6
    assert m.inner.eps_per_class is m.eps_per_class  # the base loss reads what CFA writes


def test_cfa_calibration_start_epoch_and_paper_defaults():
    m = cfa(base="at", calibration_start_epoch=10, fawa=False)
    assert m.p.lambda1 == 0.5 and not m.p.ccr  # the paper's lambda1 for AT; CCR is TRADES only
    m.end_epoch(8, nn.Linear(1, 1), [0.8, 0.3, 0.5], VAL)
    assert m.eps_per_class.tolist() == pytest.approx([0.1] * 3)
    m.end_epoch(9, nn.Linear(1, 1), [0.8, 0.3, 0.5], VAL)  # epoch 10 trains calibrated
    assert m.eps_per_class.tolist() == pytest.approx([0.13, 0.08, 0.10])
    assert CFAParams(base="fat").resolved().lambda1 == 0.7 and CFAParams(base="trades").resolved().lambda1 == 0.3


def test_cfa_ccr_loss_divides_each_sample_by_one_plus_its_beta():
    m = cfa(base="trades", fawa=False)
    m.beta_per_class.copy_(torch.tensor([1.0, 3.0, 0.0]))
    model = FixedLogits([0.0, 0.0, 0.0])
    out = m.use_attack_model(model).loss(model, torch.rand(2, 1, 2, 2), torch.tensor([0, 1]))
    # KL = 0; CE = ln 3 for both: mean(ln3 / 2, ln3 / 4)
    assert float(out.loss.detach()) == pytest.approx(1.0986123 * 0.375, rel=1e-5)


def test_fawa_gate_and_average():
    m = cfa(base="at", fawa=True, fawa_decay=0.5, fawa_threshold=0.2, fawa_start_epoch=2)
    model = nn.Linear(1, 1, bias=False)
    low = ValResult([1.0, 1.0, 1.0], [0.5, 0.1, 0.6])
    high = ValResult([1.0, 1.0, 1.0], [0.5, 0.3, 0.6])
    for epoch, weight, val in ((1, 1.0, high), (2, 2.0, low), (3, 4.0, high), (4, 6.0, high)):
        model.weight.data.fill_(weight)
        m.end_epoch(epoch, model, [0.5, 0.5, 0.5], val)
        if epoch == 1:
            assert m.fawa_accepted is None  # before fawa_start_epoch
        if epoch == 2:
            assert m.fawa_accepted is False and m.averaged_models() == {}
        if epoch == 3:  # the first accepted checkpoint is copied
            assert m.fawa_accepted and float(m.averaged_models()["fawa"]["weight"]) == 4.0
    assert float(m.averaged_models()["fawa"]["weight"]) == 5.0  # 0.5 * 4 + 0.5 * 6
    assert m.measurements()["val_worst_robust"] == 0.3


# -- WAT (Li & Liu 2023, Eq. 12) -------------------------------------------------------------------------

def wat(**kw) -> WAT:
    params = WATParams(**kw)
    return WAT(params, ctx(2, params))


def test_wat_weights_after_two_epochs(monkeypatch):
    m = wat(eta=0.5)
    assert m.hedge.tolist() == pytest.approx([1 / 3] * 3)
    costs = iter([torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64),
                  torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64)])
    monkeypatch.setattr(m, "validation_costs", lambda: next(costs))
    m.end_epoch(1, None, [], VAL)
    m.end_epoch(2, None, [], VAL)
    assert m.cost_sums.tolist() == [2.0, 4.0, 4.0]
    # softmax(0.5 * [2, 4, 4]) = [e, e^2, e^2] / (e + 2 e^2)
    assert m.hedge.tolist() == pytest.approx([0.1553624, 0.4223188, 0.4223188], rel=1e-6)


def test_wat_weights_do_not_overflow():
    w = hedge_weights(torch.tensor([5000.0, 5001.0, 5000.0], dtype=torch.float64), eta=1.0)
    assert torch.isfinite(w).all()
    assert w.tolist() == pytest.approx([0.2119416, 0.5761169, 0.2119416], rel=1e-6)
    huge = hedge_weights(torch.tensor([1e6, 2e6], dtype=torch.float64), eta=0.1)
    assert huge.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("form, expected", [("paper", 0.9834699), ("code", 1.3897688)])
def test_wat_batch_loss_forms(form, expected):
    m = wat(loss_form=form, beta=6.0)
    m.hedge = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    m.start_epoch(2, None)  # the loop hands the new weights to the batches between epochs
    model = FixedLogits([0.0, 1.0986123])  # p = [1/4, 3/4]: CE(y=0) = ln 4, CE(y=1) = ln 4/3
    out = m.use_attack_model(model).loss(model, torch.rand(3, 1, 2, 2), torch.tensor([0, 0, 1]))
    # paper: 0.2 * mean(ln4, ln4, ln4/3) + 0.5 * ln4 + 0.3 * ln4/3; code: (1.4 ln4 * 2 + 1.0 ln4/3) / 3
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-5)


# -- Tian et al. 2021: class-wise TRADES beta ---------------------------------------------------------------

def test_tian_class_wise_beta_vector():
    params = TRADESParams(beta=6.0, beta_per_class=(6.0, 0.5, 6.0))
    m = TRADES(params, ctx(3, params))
    assert m.beta_per_class.tolist() == [6.0, 0.5, 6.0]
    assert m.method_state() == {"beta_per_class": [6.0, 0.5, 6.0]}
    with pytest.raises(Exception, match="needs 3 values"):
        bad = TRADESParams(beta_per_class=(1.0, 2.0))
        TRADES(bad, ctx(3, bad))


def test_fat_early_stop_freezes_misclassified_samples():
    from engine.attacks.pgd import PGD

    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    with torch.no_grad():  # logit 0 = 10 + sum(x), logit 1 = 0: class 0 everywhere, gradients everywhere
        model[1].weight.copy_(torch.tensor([[1.0] * 4, [0.0] * 4]))
        model[1].bias.copy_(torch.tensor([10.0, 0.0]))
    x = torch.full((2, 1, 2, 2), 0.5)
    y = torch.tensor([1, 0])  # sample 0 is misclassified from the start, sample 1 never
    stopped = PGD(model, eps=0.3, step=0.1, steps=3, random_start=False, early_stop_tau=0).perturb(x, y)
    assert torch.equal(stopped[0], x[0])  # tau = 0: its attack stops at once
    assert not torch.equal(stopped[1], x[1])  # the correctly classified sample keeps being attacked
    full = PGD(model, eps=0.3, step=0.1, steps=3, random_start=False).perturb(x, y)
    assert not torch.equal(full[0], x[0])
    one_more = PGD(model, eps=0.3, step=0.1, steps=3, random_start=False, early_stop_tau=1).perturb(x, y)
    assert (one_more[0] - x[0]).abs().max() == pytest.approx(0.1)  # tau = 1: exactly one more step


def test_frl_initialize_loads_the_named_checkpoint(tmp_path):
    source = nn.Linear(3, 2)
    torch.save({"model": source.state_dict()}, tmp_path / "best.pt")
    params = FRLParams(init_from=str(tmp_path / "best.pt"))
    target = nn.Linear(3, 2)
    FRL(params, ctx(2, params)).initialize(target)
    assert torch.equal(target.weight, source.weight) and torch.equal(target.bias, source.bias)
    # as the trainer calls it: start_record reads the checkpoint once (for run_started's init), and initialize
    # loads those weights; a file that is no run's best or last checkpoint is named by its path alone
    run_ckpt = tmp_path / "runs" / "r1" / "checkpoints"
    run_ckpt.mkdir(parents=True)
    torch.save({"model": source.state_dict(), "epoch": 7}, run_ckpt / "last.pt")
    for ref, expected in ((tmp_path / "best.pt", (None, None, None)), (run_ckpt / "last.pt", ("r1", "last", 7)),
                          (run_ckpt.parent, ("r1", "last", 7))):  # a run folder without best.pt: its last
        params = FRLParams(init_from=str(ref))
        frl, target = FRL(params, ctx(2, params)), nn.Linear(3, 2)
        record = frl.start_record()
        assert (record["run_id"], record["checkpoint"], record["epoch"]) == expected, ref
        assert record["sha256"] == hashlib.sha256(Path(record["file"]).read_bytes()).hexdigest()
        frl.initialize(target)
        assert torch.equal(target.weight, source.weight) and frl._initial_state is None
    assert FRL(FRLParams(), ctx(2, FRLParams())).start_record() == {}  # no init_from: nothing to record
