"""TRIX is its authors' code (docs/reference/methods-trix-absld.md): their targeted mask, targets' rule, mixed PGD
step and loss, restated here as plain loops (no code copied), give fairtui's on the same tensors, in float64 to
1e-12 and in float32 as the other methods' parity tests; a hand-computed batch marks the strong classes; and TRIX
trains and resumes like every method.

The authors' functions: Fairness-a11y/TRIX, losses.py (``calculate_class_weights_from_clean``,
``mixed_trades_loss``)."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.contract.config import AttackConfig, Profile
from engine.contract.method_params_recent import TRIXParams
from engine.methods.base import MethodContext
from engine.methods.trix import TRIX, clean_class_weights, mixed_trades_attack, other_classes, targeted_mask

EPS, STEP, STEPS, K = 8 / 255, 2 / 255, 5, 3


# -- the authors' code, restated ------------------------------------------------------------------------

def authors_class_weights(probs, labels, k, lamb=1.0, epsilon=1e-8):
    """calculate_class_weights_from_clean, as its loops."""
    sim = torch.zeros(k, k, dtype=torch.float64)
    for i in range(k):
        rows = probs[labels == i]
        if len(rows):
            sim[i] = rows.double().mean(0)
    sim = sim + epsilon * torch.eye(k, dtype=torch.float64)
    w = torch.ones(k, dtype=torch.float64)
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            if sim[i, i] < sim[j, j]:
                w[i] += lamb * sim[i, j] * sim[j, j]
            else:
                w[i] -= lamb * sim[j, i] * sim[i, i]
    return w


def authors_attack(model, x, y, k, class_w, targets, noise):
    """mixed_trades_loss's attack: the mask from the clean predictions, then the mixed steps."""
    model.eval()
    logits_nat = model(x).detach()
    tar = authors_class_weights(F.softmax(logits_nat, 1), y, k)
    tar_mask = torch.stack([tar[int(c)] for c in y]).to(x.dtype)
    use_t = (tar_mask < tar_mask.mean()).to(x.dtype)
    y_t = torch.where(use_t.bool(), targets, y)
    w_mask = torch.stack([class_w[int(c)] for c in y]).to(x.dtype)
    x_adv = x.detach() + 0.001 * noise
    for _ in range(STEPS):
        x_adv.requires_grad_()
        logits_adv = model(x_adv)
        loss_t = F.cross_entropy(logits_adv, y_t, reduction="none")
        p_nat = F.softmax(logits_nat, 1).clamp(min=1e-10)
        loss_u = (p_nat * (p_nat.log() - F.log_softmax(logits_adv + 1e-10, 1))).sum(1)
        loss = (use_t * loss_t + (1 - use_t) * loss_u).mean()
        grad = torch.autograd.grad(loss, [x_adv])[0]
        direction = -grad.sign() * use_t.view(-1, 1, 1, 1) + grad.sign() * (1 - use_t).view(-1, 1, 1, 1)
        x_adv = x_adv.detach() + (w_mask * STEP).view(-1, 1, 1, 1) * direction
        x_adv = torch.max(torch.min(x_adv, x + (w_mask * EPS).view(-1, 1, 1, 1)), x - (w_mask * EPS).view(-1, 1, 1, 1))
        x_adv = x_adv.clamp(0, 1)
    return x_adv.detach(), use_t.bool()


def authors_outer_loss(model, x, x_adv, y, class_w, beta):
    """The weighted TRADES loss of mixed_trades_loss: f(x') first, then f(x), both in train mode."""
    model.train()
    logits_adv = model(x_adv)
    logits_nat = model(x)
    w_mask = torch.stack([class_w[int(c)] for c in y]).to(x.dtype)
    loss_nat = (F.cross_entropy(logits_nat, y, reduction="none") * w_mask).mean()
    p = F.softmax(logits_nat, 1).clamp(min=1e-10)
    loss_rob = (p * (p.log() - F.log_softmax(logits_adv + 1e-10, 1))).sum(1).mean()
    return loss_nat + beta * loss_rob


# -- fixtures -------------------------------------------------------------------------------------------

def small_cnn(dtype=torch.float64):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, K)).to(dtype)


class GivenDraws:
    """The start noise, and the uniform draws that give the wanted targets (other_classes' inverse)."""

    def __init__(self, noise, y, targets):
        self.noise = noise
        self.u = (((targets - y - 1) % K).double() + 0.5) / (K - 1)

    def randn_like(self, x):
        return self.noise

    def rand_rows(self, x):
        return self.u.to(x.dtype)


def batch(dtype, n=24, seed=5):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 8, 8, generator=gen, dtype=dtype)
    y = torch.randint(0, K, (n,), generator=gen)
    targets = (y + 1 + torch.randint(0, K - 1, (n,), generator=gen)) % K
    noise = torch.randn(x.shape, generator=gen, dtype=dtype)
    return x, y, targets, noise


# -- the mask and the targets ---------------------------------------------------------------------------

def test_a_hand_computed_batch_targets_the_strong_classes():
    """Class means P = [[.7 .2 .1] [.3 .5 .2] [.1 .1 .8]]: V_0 = 1 - .3 x .7 + .1 x .8 = 0.87, V_1 = 1 + .3 x .7
    + .2 x .8 = 1.37, V_2 = 1 - .1 x .8 - .2 x .8 = 0.76 (to 1e-8, the diagonal's epsilon); their mean over one
    sample a class is 1, so classes 0 and 2 (the strong ones) are attacked toward a target, class 1 is not."""
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.3, 0.5, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float64)
    y = torch.tensor([0, 1, 2])
    v = clean_class_weights(probs, y, 3)
    assert v.tolist() == pytest.approx([0.87, 1.37, 0.76], abs=1e-7)
    assert targeted_mask(probs, y, 3).tolist() == [True, False, True]
    # two more samples of the weak class move the batch's mean up: still the same two classes
    probs5, y5 = torch.cat([probs, probs[1:2], probs[1:2]]), torch.tensor([0, 1, 2, 1, 1])
    assert targeted_mask(probs5, y5, 3).tolist() == [True, False, True, False, False]


def test_the_clean_class_weights_are_the_authors_with_absent_classes():
    gen = torch.Generator().manual_seed(2)
    for k, n in ((3, 7), (10, 16), (10, 64)):
        probs = torch.softmax(3 * torch.randn(n, k, generator=gen, dtype=torch.float64), 1)
        y = torch.randint(0, k, (n,), generator=gen)
        ours, theirs = clean_class_weights(probs, y, k), authors_class_weights(probs, y, k)
        assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
        if k == 10 and n == 16:
            assert len(set(y.tolist())) < k  # some class absent: its row is zero and it keeps 1
            assert all(ours[c] == 1 for c in range(k) if c not in y.tolist())


def test_targets_are_uniform_over_the_other_classes():
    y = torch.tensor([0, 1, 2, 9] * 20000)
    u = torch.rand(len(y), generator=torch.Generator().manual_seed(0))
    t = other_classes(y, 10, u)
    assert (t != y).all() and t.min() >= 0 and t.max() <= 9
    counts = torch.bincount(t[y == 0], minlength=10)
    assert counts[0] == 0 and (counts[1:].double() / counts[1:].sum() - 1 / 9).abs().max() < 0.01
    assert other_classes(torch.tensor([4]), 10, torch.tensor([1 - 1e-12])).item() == 3  # u near 1: the last


# -- the attack and the loss ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_the_mixed_attack_is_the_authors(dtype, tol):
    """Targeted and untargeted samples in one batch, at class-wise margins and steps W_y eps and W_y alpha: each
    sample's adversarial example equals the authors' loop's, BatchNorm in eval mode."""
    model = small_cnn(dtype)
    x, y, targets, noise = batch(dtype)
    class_w = torch.tensor([1.3, 0.8, 0.9], dtype=torch.float64)
    w_y = class_w[y].to(dtype)
    ours, mask = mixed_trades_attack(model, x, y, K, w_y * EPS, w_y * STEP, STEPS, "textbook",
                                     GivenDraws(noise, y, targets))
    theirs, their_mask = authors_attack(model, x, y, K, class_w, targets, noise)
    assert torch.equal(mask, their_mask) and 0 < int(mask.sum()) < len(y)  # both kinds of sample are here
    assert torch.allclose(ours, theirs, rtol=0, atol=tol)
    assert ((ours - x).abs().amax(dim=(1, 2, 3)) <= w_y * EPS + tol).all()


def ctx_for(model, dtype=torch.float64, **method) -> MethodContext:
    profile = Profile(attack=AttackConfig(eps=EPS, step=STEP, steps=STEPS, kl="textbook"),
                      method=TRIXParams(warmup_epochs=1, **method))
    return MethodContext(K, profile, torch.device("cpu"), attack_model=model)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12)])
def test_trix_loss_gradient_and_sgd_step_are_the_authors(dtype, tol):
    """One batch after the warm-up (DAFA's weights W set) through fairtui's TRIX and through the authors'
    mixed_trades_loss: the same loss, gradients, weights after one SGD step and BatchNorm statistics. In float64
    (as BAT's and CSR's): in float32 the code's clamped KL and fairtui's round differently, and a sign step
    follows the rounding where a pixel's gradient is near zero (engine.attacks.trades.trades_kl), which moves
    the loss by about 4e-6 on this batch."""
    ours_model, theirs_model = small_cnn(dtype), small_cnn(dtype)
    x, y, targets, noise = batch(dtype, seed=9)
    class_w = torch.tensor([1.2, 0.7, 1.1], dtype=torch.float64)
    method = TRIX(TRIXParams(warmup_epochs=1), ctx_for(ours_model, dtype))
    # the engine's class-wise vectors are float32; in the float64 case they are float64 too, so that what is
    # compared is the arithmetic, not the margins' rounding
    eps_v, w_v = method.eps_per_class.to(dtype), method.weight_nat.to(dtype)
    method.eps_per_class = method.base.eps_per_class = eps_v
    method.weight_nat = method.base.weight_nat = w_v
    method.W = class_w.clone()
    method._apply()
    method.start_epoch(2, None)
    ours_model.train()
    out = method.loss(ours_model, x, y, GivenDraws(noise, y, targets))
    opt = torch.optim.SGD(ours_model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    opt.zero_grad()
    out.loss.backward()
    ours_grads = [p.grad.clone() for p in ours_model.parameters()]
    opt.step()

    x_adv, mask = authors_attack(theirs_model, x, y, K, class_w, targets, noise)
    loss = authors_outer_loss(theirs_model, x, x_adv, y, class_w, 6.0)
    opt2 = torch.optim.SGD(theirs_model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    opt2.zero_grad()
    loss.backward()
    theirs_grads = [p.grad.clone() for p in theirs_model.parameters()]
    opt2.step()

    assert out.loss.item() == pytest.approx(loss.item(), rel=0, abs=tol)
    for a, b in zip(ours_grads, theirs_grads):
        assert torch.allclose(a, b, rtol=0, atol=tol)
    for a, b in zip(ours_model.state_dict().values(), theirs_model.state_dict().values()):
        assert torch.allclose(a.double(), b.double(), rtol=0, atol=tol)
    share = method.targeted_share()  # what the epoch's method_state reports: each class's targeted share
    assert share == [float(mask[y == c].double().mean()) for c in range(K)]


def test_without_targets_trix_is_dafa():
    """targeted = false: the attack is DAFA's TRADES attack, to the last bit."""
    from engine.contract.method_params import DAFAParams
    from engine.methods.dafa import DAFA

    model = small_cnn()
    x, y, targets, noise = batch(torch.float64)
    trix = TRIX(TRIXParams(warmup_epochs=1, targeted=False), ctx_for(model, targeted=False))
    dafa = DAFA(DAFAParams(warmup_epochs=1), ctx_for(model, targeted=False))
    w = torch.ones(len(y), dtype=torch.float64)
    a = trix.trades_adversary(x, y, w * EPS, w * STEP, GivenDraws(noise, y, targets))
    b = dafa.trades_adversary(x, y, w * EPS, w * STEP, GivenDraws(noise, y, targets))
    assert torch.allclose(a, b, rtol=0, atol=1e-15)
    assert trix.targeted_share() == [0.0] * K


def test_a_trix_on_pgd_at_is_one_line():
    from engine.contract.config import profile_from_table
    from engine.contract.profile_schema import ProfileError

    with pytest.raises(ProfileError, match="method.base: TRIX mixes TRADES"):
        profile_from_table({"method": {"name": "trix", "base": "pgd_at"}}, "p.toml")


def test_trix_trains_reports_its_targets_and_resumes_to_the_same_weights(tmp_path, tiny_profile):
    """Stopped after its first epoch and resumed, TRIX ends where an uninterrupted run does; each epoch's
    method_state says which share of each class was attacked toward a target."""
    from tests.conftest import events_of, trained_whole_and_resumed
    from tests.engine.test_distributed import max_weight_difference

    overrides = ('method.name="trix"', "method.warmup_epochs=1", "train.epochs=3")
    whole, part = trained_whole_and_resumed(tmp_path, tiny_profile(), overrides, 2)
    assert max_weight_difference(whole, part) == 0.0
    states = [e["method_state"] for e in events_of(whole) if e["type"] == "epoch_end"]
    assert all(len(s["targeted_share"]) == 10 for s in states)
    assert any(0 < v < 1 for s in states for v in s["targeted_share"] if v is not None)
    assert states[2]["dafa_weight"] != [1.0] * 10  # DAFA's weights act after the warm-up
