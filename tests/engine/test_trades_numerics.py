"""The TRADES KL term stays finite where softmax underflows (the WAT-on-ResNet-18 NaN of epoch 1)."""

import torch
import torch.nn.functional as F

from engine.attacks.trades import trades_kl
from engine.contract.config import ModelConfig
from engine.models import build_model


def textbook_kl(logits_adv, logits_clean):
    """The form every TRADES reference writes: it differentiates through softmax(clean)."""
    return F.kl_div(F.log_softmax(logits_adv, 1), F.softmax(logits_clean, 1), reduction="none").sum(1)


def large_gap_logits():
    # A logit gap of 120 > 104: softmax(clean) underflows to exactly 0 for the small classes in fp32.
    clean = torch.tensor([[120.0, 0.0, -3.0], [0.5, 0.1, 0.0]], requires_grad=True)
    adv = torch.tensor([[100.0, 5.0, 0.0], [0.0, 0.7, 0.2]], requires_grad=True)
    return clean, adv


def test_textbook_form_gives_nan_gradients_on_a_gap_above_104():
    # The failure this module fixes: if this stops being NaN, the test below proves less.
    clean, adv = large_gap_logits()
    textbook_kl(adv, clean).sum().backward()
    assert torch.isnan(clean.grad).any()


def test_kl_gradient_is_finite_for_a_logit_gap_above_104():
    clean, adv = large_gap_logits()
    kl = trades_kl(adv, clean)
    kl.sum().backward()
    assert torch.isfinite(kl).all()
    assert torch.isfinite(clean.grad).all() and torch.isfinite(adv.grad).all()


def test_kl_equals_the_textbook_value_and_gradient_where_both_are_defined():
    g = torch.Generator().manual_seed(0)
    clean = (torch.randn(6, 10, generator=g) * 3).requires_grad_(True)
    adv = (torch.randn(6, 10, generator=g) * 3).requires_grad_(True)
    ours = trades_kl(adv, clean)
    (g_clean, g_adv) = torch.autograd.grad(ours.sum(), (clean, adv))
    ref = textbook_kl(adv, clean)
    (r_clean, r_adv) = torch.autograd.grad(ref.sum(), (clean, adv))
    assert torch.allclose(ours, ref, atol=1e-6)
    assert torch.allclose(g_clean, r_clean, atol=1e-6) and torch.allclose(g_adv, r_adv, atol=1e-6)
    # KL(p || p) = 0, and KL >= 0
    assert torch.allclose(trades_kl(clean, clean), torch.zeros(6), atol=1e-6)
    assert (ours >= -1e-6).all()


def test_resnet18_trades_step_on_large_logits_stays_finite():
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="resnet18"), (3, 32, 32), 10, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    with torch.no_grad():  # the state three SGD steps at lr 0.1 reached on CIFAR-10: logit gaps past 104
        model[1].linear.weight.mul_(400.0)
    x = torch.rand(8, 3, 32, 32)
    y = torch.randint(0, 10, (8,))
    model.train()
    logits_clean = model(x)
    assert (logits_clean.max(1).values - logits_clean.min(1).values).max() > 104
    logits_adv = model((x + 0.01 * torch.randn_like(x)).clamp(0, 1))
    loss = F.cross_entropy(logits_clean, y) + 6.0 * trades_kl(logits_adv, logits_clean).mean()
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
