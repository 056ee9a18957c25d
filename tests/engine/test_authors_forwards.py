"""`form = "code"` makes the authors' train-mode forwards: one whole training step of CFA on TRADES, FRL and
CFA on FAT against a restatement of their loops (PKU-ML/CFA attack.py and train.py's train_epoch;
hannxu123/fair_robust utils_frl2.py's train_model), comparing the loss, the weights after the step and
BatchNorm's running statistics, which depend on how often the batch is forwarded in train mode."""

import copy

import pytest
import torch
from torch import nn

from engine.contract.config import AttackConfig, Profile
from engine.contract.method_params import CFAParams, FRLParams
from engine.methods.base import MethodContext, ValResult
from engine.methods.cfa import CFA
from engine.methods.frl import FRL
from tests.engine.test_authors_parity import SmallBN


# -- BatchNorm: the authors' train-mode forwards, step by step ---------------------------------------------

def ctx3(params) -> MethodContext:
    """Three classes (SmallBN's head); the profile resolved as a run's would be."""
    profile = Profile(attack=AttackConfig(eps=0.3, step=0.1, steps=10), method=params)
    return MethodContext(3, profile, torch.device("cpu"))


def ours_step(method, model, x, y, seed):
    """The trainer's batch: the method's loss, one SGD step, and the train-mode clean forward after it
    when the method asks for one (engine/training/trainer.py, train_epoch)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    torch.manual_seed(seed)
    out = method.use_attack_model(model).loss(model, x, y)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    if out.clean_after_step:
        with torch.no_grad():
            model(x)
    return float(out.loss.detach())


def assert_same_model(ours, theirs, forwards):
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert int(ours.bn.num_batches_tracked) == int(theirs.bn.num_batches_tracked) == forwards


def authors_trades_attack(model, x, eps, step, steps):
    """x + 0.001 N(0, 1), then signed KL steps in eval mode, clamped to the ball and [0, 1] (the CFA and
    FRL codes), on their KLDivLoss(log_softmax, softmax): `form = "code"` selects that arithmetic."""
    model.eval()
    x_adv = x + 0.001 * torch.randn(x.shape)
    for _ in range(steps):
        x_adv.requires_grad_()
        with torch.no_grad():
            clean = model(x)
        grad = torch.autograd.grad(textbook_kl(model(x_adv), clean).sum(), [x_adv])[0]
        x_adv = x_adv.detach() + step * torch.sign(grad)
        x_adv = torch.min(torch.max(x_adv, x - eps), x + eps).clamp(0.0, 1.0)
    model.train()
    return x_adv


def textbook_kl(adv_logits, clean_logits):
    return nn.functional.kl_div(nn.functional.log_softmax(adv_logits, 1), nn.functional.softmax(clean_logits, 1),
                                reduction="none").sum(1)


def authors_step(model, seed, loss_of, clean_after=None):
    """One step of an authors' loop on ``model`` (train mode, SGD lr 0.1): ``loss_of(model)`` under
    ``seed``, backward, step, then (CFA's train_epoch) a train-mode forward of ``clean_after``.
    Returns the loss and whatever else ``loss_of`` returned."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    torch.manual_seed(seed)
    loss, *extra = loss_of(model)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if clean_after is not None:
        model(clean_after)  # train_epoch's clean_output, after opt.step()
    return float(loss.detach()), *extra


def batch3():
    torch.manual_seed(0)
    model = SmallBN()
    x = torch.rand(24, 1, 4, 4)
    x[:6] = (x[:6] > 0.5).float()  # pixels at 0 and 1, as on digits
    return model, x, torch.tensor([0, 1, 2] * 8)


def test_cfa_trades_code_form_makes_the_authors_train_mode_forwards():
    """cw_trades_loss: clean, adversarial and clean again (the KL's target) in train mode; train_epoch:
    a train-mode clean forward after the step. Four updates of the running statistics per batch."""
    params = CFAParams(form="code", base="trades", beta=6.0)
    m = CFA(params, ctx3(params))
    model, x, y = batch3()
    theirs = copy.deepcopy(model)
    loss = ours_step(m, model, x, y, seed=4)

    def cw_trades_loss(net):
        x_adv = authors_trades_attack(net, x, 0.3, 0.1, 10)
        b = torch.full((3,), 6.0 / 7.0)[y]  # class_beta = beta / (1 + beta) before calibration
        natural = nn.functional.cross_entropy(net(x), y, reduction="none") / len(y)
        robust = textbook_kl(net(x_adv), net(x)) / len(y)
        return ((1 - b) * natural + b * robust).sum(),

    (expected,) = authors_step(theirs, 4, cw_trades_loss, clean_after=x)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert_same_model(model, theirs, forwards=4)


def test_frl_code_form_makes_the_authors_train_mode_forwards():
    """utils_frl2.py train_model: clean, adversarial and clean again in train mode, weighted losses."""
    params = FRLParams(form="code", beta=1.5)
    m = FRL(params, ctx3(params))
    m.start_epoch(1, ValResult([0.9, 0.6, 0.8], [0.5, 0.1, 0.4]))  # weights and margins move
    assert not torch.allclose(m.weight_nat, torch.full((3,), 1 / 3))
    model, x, y = batch3()
    theirs = copy.deepcopy(model)
    loss = ours_step(m, model, x, y, seed=5)

    def train_model_loss(net):
        eps = m.eps_per_class[y].view(-1, 1, 1, 1)
        x_adv = authors_trades_attack(net, x, eps, eps.max() / 4, 10)
        w0, w1 = m.weight_nat[y], m.weight_bndy[y]
        natural = nn.functional.cross_entropy(net(x), y, reduction="none")
        bndy = textbook_kl(net(x_adv), net(x))
        return (natural * w0).sum() / w0.sum() + 1.5 * (bndy * w1).sum() / w1.sum(),

    (expected,) = authors_step(theirs, 5, train_model_loss)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert_same_model(model, theirs, forwards=3)


def authors_cw_fat_loss(model, x, y, eps, tau, alpha, n_iters):
    """CFA's attack.py cw_fat_loss, restated (in train mode, as train_epoch calls it)."""
    delta = (torch.rand_like(x) - 0.5) * 2 * eps
    delta = torch.clamp(delta, 0 - x, 1 - x)
    control = torch.ones(len(x)) * tau
    delta.requires_grad = True
    output = model(x + delta)
    pred = output.max(1)[1]
    k, moves = n_iters, 0
    while k > 0:
        index = []
        for i in range(len(y)):
            if pred[i] != y[i] and control[i] > 0:
                control[i] -= 1
                index.append(i)
            elif pred[i] == y[i] and control[i] > 0:
                index.append(i)
        if not index:
            break
        grad = torch.autograd.grad(nn.functional.cross_entropy(output, y), delta)[0]
        d = torch.clamp(delta[index] + alpha * torch.sign(grad[index]), min=-eps, max=eps)
        d = torch.clamp(d, 0 - x[index], 1 - x[index])
        delta = delta.detach()
        delta[index] = d.detach()
        delta.requires_grad_()
        output = model(x + delta)
        pred = output.max(1)[1]
        moves += 1
        k -= 1
    robust = model(x + delta)
    return nn.functional.cross_entropy(robust, y), moves


@pytest.mark.parametrize("tau", [3, 0])
def test_cfa_fat_code_form_is_the_authors_fat_loss_with_its_forwards(tau):
    """cw_fat_loss in train mode: a forward at the start, one after every step, one for the loss, and
    train_epoch's clean forward after the optimiser step; a sample moves while its control is above 0."""
    params = CFAParams(form="code", base="fat", fat_tau=tau)
    m = CFA(params, ctx3(params))
    assert m.inner.attack.model_mode == "train"
    model, x, y = batch3()
    theirs = copy.deepcopy(model)
    loss = ours_step(m, model, x, y, seed=6)

    expected, moves = authors_step(theirs, 6, lambda net: authors_cw_fat_loss(net, x, y, 0.3, tau, 0.1, 10),
                                   clean_after=x)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert moves == (10 if tau else 0)  # tau = 0: their control starts at 0, so nothing moves
    assert_same_model(model, theirs, forwards=1 + moves + 2)


def test_early_stop_rules_differ_where_a_sample_is_classified_correctly_again():
    """One sample misclassified, then correct, then misclassified, then correct (W, C, W, C), tau = 1.
    FAT (Zhang et al.): it spends its step at the first W, moves on the C, stops at the next W.
    The CFA authors' code: once its control is spent it stops, whatever it is classified as."""
    from engine.attacks.pgd import PGD

    def moves(rule):
        attack = PGD(None, eps=0.1, step=0.1, steps=4, early_stop_tau=1, early_stop_rule=rule)
        active, budget = torch.tensor([True]), torch.tensor([1])
        out = []
        for wrong in (True, False, True, False):
            active, budget = attack._early_stop(torch.tensor([wrong]), active, budget)
            out.append(bool(active))
        return out

    assert moves("fat") == [True, True, False, False]
    assert moves("cfa_code") == [True, False, False, False]
