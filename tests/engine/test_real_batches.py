"""Every method survives the batches real data produces: a short last batch, a class absent from a
batch, a class with zero validation error and a class with no validation samples at all."""

import math

import pytest
import torch

from engine.contract.config import AttackConfig, DataConfig, Profile
from engine.data import TensorData
from engine.contract.method_params import (CFAParams, DAFAParams, FAALParams, FATParams, FRLParams, NaturalParams,
                                  PGDATParams, TRADESParams, WATParams)
from engine.methods import build_method
from engine.methods.base import MethodContext, ValResult
from engine.models import SmallCNN

K = 4
SETTINGS = {
    "pgd_at": PGDATParams(),
    "natural": NaturalParams(),
    "fat": FATParams(tau=1),
    "trades": TRADESParams(),
    "tian-trades": TRADESParams(beta_per_class=(6.0, 6.0, 0.5, 6.0)),
    "frl-rw-rm": FRLParams(),
    "frl-code-form": FRLParams(margin_form="code"),
    "frl-rw": FRLParams(variant="reweight"),
    "frl-rm": FRLParams(variant="remargin"),
    "frl-baseline": FRLParams(variant="baseline_reweight"),
    "cfa-at": CFAParams(base="at", calibration_start_epoch=2, fawa_start_epoch=1).resolved(),
    "cfa-trades": CFAParams(base="trades", calibration_start_epoch=2, fawa_start_epoch=1).resolved(),
    "cfa-fat": CFAParams(base="fat", fat_tau=3, calibration_start_epoch=2, fawa_start_epoch=1).resolved(),
    "wat": WATParams(),
    "dafa-trades": DAFAParams(warmup_epochs=1, weight_floor=0.05),  # P from epoch 1: class 3 has no row
    "dafa-pgd-at-code": DAFAParams(base="pgd_at", form="code", warmup_epochs=2, weight_floor=0.05),
    "faal-at": FAALParams(),
    "faal-trades-class-mean": FAALParams(base="trades", class_scores="class_mean"),
    "wat-code-form": WATParams(loss_form="code"),
}


def make(params):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    val = TensorData((torch.rand(8, 3, 8, 8, generator=g) * 255).to(torch.uint8), torch.tensor([0, 1, 2, 3] * 2))
    profile = Profile(data=DataConfig(eval_batch_size=3), attack=AttackConfig(eps=0.1, step=0.03, steps=2),
                      method=params)
    method = build_method(MethodContext(K, profile, torch.device("cpu"), val))
    return method, torch.nn.Sequential(SmallCNN(3, K))


def step_is_finite(method, model, x, y) -> None:
    model.train()
    out = method.use_attack_model(model).loss(model, x, y)
    out.loss.backward()
    assert torch.isfinite(out.loss), out.loss
    for p in model.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()
    model.zero_grad()
    for logits in (out.logits_adv, out.logits_clean):
        assert logits is None or logits.shape == (len(y), K)


def state_is_finite(method) -> None:
    for key, value in method.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert torch.isfinite(value.double()).all(), key


@pytest.mark.parametrize("setting", SETTINGS)
def test_method_survives_real_batches(setting):
    method, model = make(SETTINGS[setting])
    x = torch.rand(5, 3, 8, 8)
    method.start_epoch(1, None)
    step_is_finite(method, model, x[:1], torch.tensor([2]))  # a short last batch of one image
    step_is_finite(method, model, x, torch.tensor([0, 0, 1, 0, 1]))  # classes 2 and 3 absent
    # Epoch 1 ends: class 3 absent from every training batch, class 0 without any validation error.
    val = ValResult(clean_acc_per_class=[1.0, 0.5, 0.75, 0.5], robust_acc_per_class=[1.0, 0.25, 0.5, 0.0])
    method.end_epoch(1, model, [1.0, 0.3, 0.2, None], val)
    assert math.isfinite(method.selection_score(val))
    method.start_epoch(2, val)
    state_is_finite(method)
    step_is_finite(method, model, x, torch.tensor([3, 3, 3, 3, 3]))  # one class only
    # A class with no validation samples at all (a tiny or imbalanced validation split).
    hollow = ValResult(clean_acc_per_class=[1.0, None, 0.75, 0.5], robust_acc_per_class=[1.0, None, 0.5, 0.0])
    method.end_epoch(2, model, [0.9, None, 0.2, 0.4], hollow)
    assert math.isfinite(method.selection_score(hollow))
    method.start_epoch(3, hollow)
    state_is_finite(method)
    step_is_finite(method, model, x[:2], torch.tensor([1, 2]))


def test_frl_class_without_validation_samples_keeps_its_multipliers():
    method, _ = make(FRLParams(alpha1=0.1, alpha2=0.1, alpha_margin=0.1))
    hollow = ValResult(clean_acc_per_class=[0.9, None, 0.6, 0.75], robust_acc_per_class=[0.6, None, 0.2, 0.45])
    method.start_epoch(1, hollow)
    # the measured classes are FRL's 3-class example: gamma_nat = [-0.2, 0.1, -0.05] -> lambda_nat [0, .01, 0]
    assert method.lambda_nat.tolist() == pytest.approx([0.0, 0.0, 0.01, 0.0], abs=1e-9)
    assert float(method.lambda_margin[1]) == 0.0
