"""Every attack keeps each sample inside its own eps-ball and [0, 1], and restores the model's mode."""

import pytest
import torch
from torch import nn

from engine.attacks.pgd import PGD, FGSM, cw_margin
from engine.attacks.suite import AttackSettings, build_attack, parse_attack_name
from engine.attacks.trades import TRADESAttack, trades_kl
from engine.contract.request import RequestError


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, 5))


def batch(n: int = 16):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 3, 8, 8, generator=g)
    x[0] = 0.0  # corners of the box: projection onto [0, 1] must hold there too
    x[1] = 1.0
    y = torch.randint(0, 5, (n,), generator=g)
    return x, y


def distance(x_adv, x, norm):
    d = (x_adv - x).flatten(1)
    return d.abs().amax(1) if norm == "linf" else d.norm(dim=1)


TRAINING_ATTACKS = {
    "pgd-ce": lambda m, norm: PGD(m, eps=0.1, step=0.05, steps=5, norm=norm),
    "pgd-cw": lambda m, norm: PGD(m, eps=0.1, step=0.05, steps=5, norm=norm, loss="cw"),
    "pgd-ce_t": lambda m, norm: PGD(m, eps=0.1, step=0.05, steps=5, norm=norm, loss="ce_t", temperature=0.2),
    "pgd-restarts": lambda m, norm: PGD(m, eps=0.1, step=0.05, steps=3, norm=norm, restarts=2),
    "fgsm": lambda m, norm: FGSM(m, eps=0.1, norm=norm),
    "trades": lambda m, norm: TRADESAttack(m, eps=0.1, step=0.05, steps=5, norm=norm),
}


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("name", list(TRAINING_ATTACKS))
@pytest.mark.parametrize("was_training", [True, False])
def test_per_sample_ball_box_and_mode(name, norm, was_training):
    model = tiny_model().train(was_training)
    x, y = batch()
    eps = torch.linspace(0.01, 0.3, len(y))  # every sample its own margin
    attack = TRAINING_ATTACKS[name](model, norm)
    x_adv = attack.perturb(x, y, eps=eps, step=eps / 2) if name != "fgsm" else attack.perturb(x, y, eps=eps,
                                                                                                step=eps)
    assert model.training == was_training
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert (distance(x_adv, x, norm) <= eps + 1e-6).all()
    assert (distance(x_adv, x, norm) > 0).any()


@pytest.mark.parametrize("name", ["clean", "fgsm", "pgd7", "pgd20", "cw", "cw10", "tpgd", "tpgd5"])
@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_named_attacks_stay_in_the_ball(name, norm):
    model = tiny_model().eval()
    x, y = batch()
    attack = build_attack(name, model, AttackSettings(eps=0.05, step=0.02, norm=norm))
    x_adv = attack.perturb(x, y)
    assert not model.training
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert (distance(x_adv, x, norm) <= 0.05 + 1e-6).all()


def test_attack_names_parse():
    assert parse_attack_name("pgd100") == ("pgd", 100)
    assert parse_attack_name("cw") == ("cw", 20)
    assert parse_attack_name("aa-fast") == ("aa-fast", 0)
    with pytest.raises(ValueError, match="unknown attack"):
        parse_attack_name("deepfool")


def test_pgd_raises_the_loss_above_random_noise():
    model = tiny_model().eval()
    x, y = batch(64)
    loss = lambda xx: nn.functional.cross_entropy(model(xx), y).item()  # noqa: E731
    noise = (x + (torch.rand_like(x) * 2 - 1) * 0.1).clamp(0, 1)
    x_adv = PGD(model, eps=0.1, step=0.025, steps=10).perturb(x, y)
    assert loss(x_adv) > loss(noise) + 0.1


def test_cw_margin_by_hand():
    logits = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, -1.0]])
    y = torch.tensor([0, 2])
    # sample 0: max other 2 - true 3 = -1; sample 1: 5 - (-1) = 6, clamped at -kappa only from below
    assert cw_margin(logits, y, kappa=50).tolist() == [-1.0, 6.0]
    assert cw_margin(logits, y, kappa=0.5).tolist() == [-0.5, 6.0]


def test_trades_kl_is_zero_for_identical_logits_and_positive_otherwise():
    a = torch.tensor([[1.0, 2.0, 3.0]])
    assert trades_kl(a, a).item() == pytest.approx(0.0, abs=1e-7)
    p, q = torch.softmax(a, 1), torch.softmax(a.flip(1), 1)
    expected = (p * (p / q).log()).sum().item()  # KL(f(x) || f(x')) with f(x) = softmax(a)
    assert trades_kl(a.flip(1), a).item() == pytest.approx(expected, rel=1e-5)


class Recording(nn.Module):
    """A linear model that records the input of every forward pass."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.lin = nn.Linear(3 * 8 * 8, 5)
        self.inputs: list[torch.Tensor] = []

    def forward(self, x):
        self.inputs.append(x.detach().clone())
        return self.lin(x.flatten(1))


def test_trades_attack_takes_its_first_gradient_at_the_unclamped_start():
    """TRADES and the CFA, FRL and WAT codes: x' = x + 0.001 N(0, 1) as it is (no clamp into [0, 1]);
    each step's projection keeps x' in the box."""
    x, _ = batch()  # samples 0 and 1 sit at 0 and 1: their starts leave the box
    model = Recording()
    torch.manual_seed(7)
    x_adv = TRADESAttack(model, eps=0.1, step=0.05, steps=2).perturb(x)
    torch.manual_seed(7)
    start = x + 0.001 * torch.randn_like(x)
    first_step = model.inputs[1]  # inputs[0] is the clean forward that the KL compares against
    torch.testing.assert_close(first_step, start, rtol=0, atol=0)
    assert (first_step < 0).any() and (first_step > 1).any()  # the start really is outside [0, 1]
    assert 0 <= x_adv.min() and x_adv.max() <= 1 and distance(x_adv, x, "linf").max() <= 0.1 + 1e-6


class _Toy:
    def __init__(self, steps):
        self.steps = steps

    def perturb(self, x, y, draws=None):
        return x


def build_toy(model, settings, steps):
    return _Toy(steps)


def test_an_attack_is_one_row_of_the_table_and_one_builder(monkeypatch):
    """Adding an attack: a row in engine.contract.attacks and its builder. The request's grammar, its help,
    a result's identity (setting), the profile check and the engine's suite all follow from the row."""
    from engine.contract import attacks
    from engine.contract.config import profile_from_table
    from engine.contract.request import EvalRequest, parse_attack
    from engine.contract.results import attack_family, requested_setting

    toy = attacks.Attack("toy", 3, ("eps", "norm", "seed"), "tests.engine.test_attacks:build_toy", "toy<N>")
    monkeypatch.setattr(attacks, "ATTACKS", [*attacks.ATTACKS, toy])
    assert parse_attack("toy") == ("toy", 3) and parse_attack("toy7") == ("toy", 7)
    assert EvalRequest(attacks=("toy5", "pgd20")).attacks == ("toy5", "pgd20")
    assert "toy<N>" in attacks.known() and attack_family("toy12") == "toy"
    config = {"seed": 4, "attack": {"eps": 0.1, "step": 0.02, "norm": "linf"}, "eval": {}, "data": {}}
    assert requested_setting(config, "toy5") == {"n_per_class": 0, "eps": 0.1, "norm": "linf", "seed": 4}
    assert profile_from_table({"eval": {"attacks": ["toy2", "clean"]}}, "p.toml").eval.attacks == ("toy2", "clean")
    built = build_attack("toy5", nn.Linear(2, 2), AttackSettings(eps=0.1, step=0.02))
    assert isinstance(built, _Toy) and built.steps == 5
    monkeypatch.undo()
    with pytest.raises(RequestError, match="unknown attack 'toy5'"):
        parse_attack("toy5")
