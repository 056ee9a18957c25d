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


def test_the_textbook_form_is_the_authors_arithmetic_to_the_bit():
    g = torch.Generator().manual_seed(1)
    clean, adv = torch.randn(8, 10, generator=g) * 3, torch.randn(8, 10, generator=g) * 3
    assert torch.equal(trades_kl(adv, clean, "textbook"), textbook_kl(adv, clean))


def authors_trades_attack(model, x, eps, step, steps, kl):
    """The TRADES authors' attack (and every TRADES-based method's code): x + 0.001 N(0, 1), then signed steps on
    KLDivLoss(log_softmax(f(x')), softmax(f(x))) in eval mode, clamped to the ball and [0, 1]."""
    model.eval()
    x_adv = x + 0.001 * torch.randn(x.shape)
    with torch.no_grad():
        clean = model(x)
    for _ in range(steps):
        x_adv.requires_grad_()
        grad = torch.autograd.grad(kl(model(x_adv), clean).sum(), [x_adv])[0]
        x_adv = x_adv.detach() + step * torch.sign(grad)
        x_adv = torch.min(torch.max(x_adv, x - eps), x + eps).clamp(0.0, 1.0)
    return x_adv


def test_attack_kl_textbook_reproduces_the_textbook_adversarial_examples_exactly_and_form_code_selects_it():
    """float32, the same seed: `attack.kl = "textbook"` takes every step the authors' code takes; the log-space form
    steps the other way in some pixels (the sign of a near-zero gradient), which is why the option exists."""
    from engine.attacks.trades import TRADESAttack
    from engine.contract.config import AttackConfig, Profile, trades_kl_form
    from engine.contract.method_params import CFAParams, DAFAParams, TRADESParams

    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="preact_resnet18", base_width=8), (3, 32, 32), 10, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)).eval()
    x = torch.rand(16, 3, 32, 32)
    results = {}
    for form in ("textbook", "log_space"):
        attack = TRADESAttack(model, eps=8 / 255, step=2 / 255, steps=5, kl=form)
        torch.manual_seed(3)
        results[form] = attack.perturb(x)
    torch.manual_seed(3)
    theirs = authors_trades_attack(model, x, 8 / 255, 2 / 255, 5, textbook_kl)
    # Every step's sign is the authors': what remains is the last bit of float32 (fairtui steps delta and adds x,
    # the codes step x' itself), never a step of 2/255.
    torch.testing.assert_close(results["textbook"], theirs, rtol=0, atol=1.2e-7)
    flipped = ((results["log_space"] - theirs).abs() > 1e-6).float().mean().item()
    assert flipped > 0.01  # measured 8.3% of the pixels on this untrained 1/8-width PreAct-ResNet18
    assert trades_kl_form(Profile(method=CFAParams(form="code"))) == "textbook"
    assert trades_kl_form(Profile(method=DAFAParams(form="code"))) == "textbook"
    assert trades_kl_form(Profile(method=DAFAParams())) == "log_space"
    assert trades_kl_form(Profile(method=TRADESParams())) == "log_space"
    assert trades_kl_form(Profile(attack=AttackConfig(kl="textbook"), method=TRADESParams())) == "textbook"
    assert trades_kl_form(Profile(attack=AttackConfig(kl="log_space"), method=CFAParams(form="code"))) == "log_space"


def test_every_trades_based_method_passes_the_form_to_its_attack_and_loss(monkeypatch):
    """Each method that computes a TRADES KL (in its attack or its loss) uses the resolved form: a profile with
    attack.kl = "textbook" reaches every call."""
    import engine.attacks.trades as trades_module
    from engine.contract.config import AttackConfig, Profile, TrainConfig
    from engine.contract.method_params import CFAParams, DAFAParams, FAALParams, FRLParams, TRADESParams, WATParams
    from engine.contract.method_params_recent import BATParams, CSRParams
    from engine.methods import build_method
    from engine.methods.base import MethodContext

    seen = []
    real = trades_module.trades_kl

    def spy(a, c, form="log_space"):
        seen.append(form)
        return real(a, c, form)

    for module in ("engine.attacks.trades", "engine.methods.standard", "engine.methods.csr", "engine.methods.bat",
                   "engine.methods.dafa", "engine.methods.faal", "engine.methods.wat"):
        monkeypatch.setattr(f"{module}.trades_kl", spy)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    x, y = torch.rand(6, 1, 4, 4), torch.tensor([0, 1, 2] * 2)
    for params in (TRADESParams(), CFAParams(base="trades"), FRLParams(), WATParams(), DAFAParams(base="trades"),
                   FAALParams(base="trades", pretrain_epochs=1), BATParams(), CSRParams(pretrain_epochs=1)):
        seen.clear()
        profile = Profile(attack=AttackConfig(eps=0.1, step=0.03, steps=2, kl="textbook"), method=params,
                          train=TrainConfig(epochs=3))
        method = build_method(MethodContext(3, profile, torch.device("cpu"), attack_model=model))
        method.start_epoch(2, None)
        if params.name == "csr":
            method.weights = torch.ones(3, 3)
        method.loss(model.train(), x, y)
        assert seen and set(seen) == {"textbook"}, params.name
