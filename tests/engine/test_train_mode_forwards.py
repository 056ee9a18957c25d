"""Which batches each method forwards in train mode, and in what order: the authors' order for every method whose
authors' code is known (DAFA, FAAL, BAT, CSR, WAT here; CFA and FRL in test_authors_forwards.py). The loss does not
depend on it, but BatchNorm's running statistics do, and the next batch's eval-mode attack reads them. Each
expectation is written out from the authors' code, as docs/profiles-and-methods.md's table cites it."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from engine.contract.config import AttackConfig, Profile, TrainConfig
from engine.contract.method_params import DAFAParams, FAALParams, WATParams
from engine.contract.method_params_recent import BATParams, CSRParams
from engine.methods import build_method
from engine.methods.base import MethodContext
from tests.engine.test_authors_forwards import ours_step


class Recorder(nn.Module):
    """A small BatchNorm model that records each train-mode forward by the name of the batch it was given."""

    def __init__(self, named: dict[str, torch.Tensor]):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 16, 3)
        self.named = named
        self.train_forwards: list[str] = []

    def forward(self, x):
        if self.training:
            name = next((k for k, v in self.named.items() if v.shape == x.shape and torch.equal(v, x)), "other")
            self.train_forwards.append(name)
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))


def batch():
    torch.manual_seed(0)
    x = torch.rand(12, 1, 4, 4)
    y = torch.tensor([0, 1, 2] * 4)
    return x, y, {"x": x, "x'": (x + 0.05).clamp(0, 1), "x'_last_clean": (x + 0.02).clamp(0, 1),
                  "x'_first_adv": (x - 0.03).clamp(0, 1)}


def stub_attacks(method, named):
    """Every attack of the method (and of the methods it wraps) returns a fixed, named x': the attacks run in
    eval mode and are tested elsewhere; here only the loss's forwards count."""
    for key, value in vars(method).items():
        if hasattr(value, "loss") and hasattr(value, "ctx") and value is not method:
            stub_attacks(value, named)
        elif hasattr(value, "perturb"):
            adv = named.get(f"x'_{key}", named["x'"])
            value.perturb = lambda *a, _adv=adv, **k: _adv


def one_step(params, epoch=1, epochs=3, prepare=None):
    """The trainer's batch (engine/training/trainer.py, train_epoch): the loss, one SGD step, and a train-mode clean
    forward after it when the loss asks for one. Returns the train-mode forwards by name."""
    x, y, named = batch()
    profile = Profile(attack=AttackConfig(eps=0.1, step=0.03, steps=2), train=TrainConfig(epochs=epochs),
                      method=params)
    model = Recorder(named)
    method = build_method(MethodContext(3, profile, torch.device("cpu"), attack_model=model))
    stub_attacks(method, named)
    method.start_epoch(epoch, None)
    if prepare:
        prepare(method)
    ours_step(method, model, x, y, seed=0)
    return model.train_forwards


def test_dafa_on_trades_forwards_x_adv_then_x_as_the_authors_losses_py():
    """rucy74/DAFA losses.py trades_loss, l.65-66: logits = model(x_adv), then logits_nat = model(x_natural)."""
    assert one_step(DAFAParams(base="trades", warmup_epochs=1)) == ["x'", "x"]
    assert one_step(DAFAParams(base="trades", warmup_epochs=1), epoch=2) == ["x'", "x"]  # with W too
    assert one_step(DAFAParams(base="trades", form="code", warmup_epochs=1)) == ["x'", "x"]


@pytest.mark.parametrize("form", ["paper", "code"])
def test_dafa_on_pgd_at_forwards_x_adv_only(form):
    """losses.py madry_loss: one train-mode forward, of x'; the clean accuracy comes from an eval-mode forward.
    The code form's own attack (two moves per iteration) runs in eval mode, so its x' is not a stub here."""
    forwards = one_step(DAFAParams(base="pgd_at", form=form, warmup_epochs=1))
    assert forwards == (["x'"] if form == "paper" else ["other"])


def test_dafa_batchnorm_statistics_after_one_step_are_those_of_the_authors_order():
    """The running statistics after one step equal those of forwarding x' then x (the authors'), and differ
    from x then x' (fairtui's order before the fifth fidelity round)."""
    x, y, named = batch()
    ours = Recorder(named)
    theirs, swapped = copy.deepcopy(ours), copy.deepcopy(ours)
    params = DAFAParams(base="trades", warmup_epochs=1)
    method = build_method(MethodContext(3, Profile(attack=AttackConfig(eps=0.1, step=0.03, steps=2), method=params),
                                        torch.device("cpu"), attack_model=ours))
    stub_attacks(method, named)
    method.start_epoch(1, None)
    ours.train()
    method.loss(ours, x, y)
    for model, order in ((theirs, ("x'", "x")), (swapped, ("x", "x'"))):
        model.train()
        for name in order:
            model(named[name])
    torch.testing.assert_close(ours.bn.running_mean, theirs.bn.running_mean, rtol=0, atol=0)
    torch.testing.assert_close(ours.bn.running_var, theirs.bn.running_var, rtol=0, atol=0)
    assert not torch.equal(ours.bn.running_mean, swapped.bn.running_mean)


@pytest.mark.parametrize("base", ["at", "trades"])
def test_faal_forwards_x_adv_then_x_also_on_at(base):
    """TrustAI/FAAL ft_prn.py l.217-218: z' = model(x'), z = model(x), in train mode, for AT too (its output
    unused there). The fine-tune's epochs only: its pre-training epochs are the base method's."""
    params = FAALParams(base=base, pretrain_epochs=1)
    assert one_step(params, epoch=2) == ["x'", "x"]


def test_bat_forwards_last_clean_then_first_adversarial_then_clean():
    """silvercherry/...Balance-Adversarial-Training: the early-stopped iterates' forwards, then the clean one."""
    assert one_step(BATParams()) == ["x'_last_clean", "x'_first_adv", "x"]


def test_csr_forwards_x_x_adv_x_x_adv():
    """Alexkael/CONFUSIONAL-SPECTRAL-REGULARIZATION trades_loss: the natural CE's x, the KL's x' and x, the
    spectral term's x'."""

    def spectral_weights(method):
        method.weights = torch.ones(3, 3)

    assert one_step(CSRParams(pretrain_epochs=1), epoch=2, prepare=spectral_weights) == ["x", "x'", "x", "x'"]


def test_wat_forwards_x_then_x_adv():
    """boqili/WAT worst_class_adversarial_train.py train(): natural_logits = model(data), then
    adv_logits = model(output_adv)."""
    assert one_step(WATParams()) == ["x", "x'"]


@pytest.mark.parametrize("params, expected", [
    ("pgd_at", ["x'"]), ("trades", ["x", "x'"]), ("tian", ["x", "x'"]), ("trades_code", ["x", "x'", "x"])])
def test_the_baselines_forwards(params, expected):
    """PGD-AT, TRADES's paper form and Tian et al.'s class-wise-beta TRADES: fairtui's forwards, recorded in the
    docs' table so that a change of them is a decision. TRADES's code form: yaodongyu/TRADES trades.py's
    trades_loss, model(x_natural) for the CE, then model(x_adv) and model(x_natural) again for the KL."""
    from engine.contract.method_params import PGDATParams, TRADESParams

    made = {"pgd_at": PGDATParams(), "trades": TRADESParams(), "tian": TRADESParams(beta_per_class=(6.0, 3.0, 6.0)),
            "trades_code": TRADESParams(form="code")}
    assert one_step(made[params]) == expected


def test_trades_code_form_is_the_authors_trades_loss_in_float64():
    """yaodongyu/TRADES trades.py, trades_loss after the attack (transcribed here as the oracle): in train mode,
    logits = model(x); loss_natural = CE(logits, y); loss_robust = (1 / B) KLDivLoss(sum)(log_softmax(model(x')),
    softmax(model(x))); loss = loss_natural + beta loss_robust. In float64 the code form's loss, gradient and
    BatchNorm running statistics equal it exactly (the statistics are what evaluation reads); the paper form's
    statistics differ (two forwards), its loss does not."""
    import torch.nn.functional as F

    from engine.contract.method_params import TRADESParams

    x, y, named = batch()
    x, named = x.double(), {k: v.double() for k, v in named.items()}
    base = Recorder(named).double()
    results = {}
    for form in ("code", "paper"):
        model = copy.deepcopy(base)
        profile = Profile(attack=AttackConfig(eps=0.1, step=0.03, steps=2), method=TRADESParams(form=form))
        method = build_method(MethodContext(3, profile, torch.device("cpu"), attack_model=model))
        assert method.ctx.kl == ("textbook" if form == "code" else "log_space")
        stub_attacks(method, named)
        method.start_epoch(1, None)
        model.train()
        out = method.loss(model, x, y)
        out.loss.backward()
        results[form] = (out.loss.detach(), model.conv.weight.grad.clone(), model.bn.running_mean.clone(),
                         model.bn.running_var.clone())
    theirs = copy.deepcopy(base)
    theirs.train()
    logits = theirs(x)
    loss_natural = F.cross_entropy(logits, y)
    loss_robust = (1.0 / len(x)) * torch.nn.KLDivLoss(reduction="sum")(F.log_softmax(theirs(named["x'"]), dim=1),
                                                                     F.softmax(theirs(x), dim=1))
    loss = loss_natural + 6.0 * loss_robust
    loss.backward()
    expected = (loss.detach(), theirs.conv.weight.grad, theirs.bn.running_mean, theirs.bn.running_var)
    for got, want in zip(results["code"], expected):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-14)
    torch.testing.assert_close(results["paper"][0], expected[0], rtol=0, atol=1e-12)  # the same loss ...
    assert (results["paper"][2] - expected[2]).abs().max() > 1e-3  # ... and other running statistics
