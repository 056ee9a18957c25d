"""Every shipped paper profile trains at its authors' learning rate in every epoch. Each authors' schedule is written
out by hand below, as their code computes it and with the epoch it is called with, so that an off-by-one in a
profile's milestones (fairtui lowers the rate *after* epoch m) cannot pass. The engine's rate is the trainer's:
the profile's schedule (engine.training.trainer.lr_at), then the method's own (Method.lr_for: FRL, FAAL, CSR)."""

from __future__ import annotations

import bisect

import pytest
import torch

from engine.contract.profile_io import load_profile
from engine.methods import build_method
from engine.methods.base import MethodContext
from engine.training.trainer import lr_at
from tests.conftest import ROOT


def cfa_lr_schedule(epoch: int, epochs: int = 200) -> float:
    """PKU-ML/CFA train.py lr_schedule(t), t the 0-based epoch: 0.1 while t / epochs < 0.5, then /10, /100."""
    t = epoch - 1
    if t / epochs < 0.5:
        return 0.1
    if t / epochs < 0.75:
        return 0.1 / 10.0
    return 0.1 / 100.0


def trades_adjust_learning_rate(epoch: int) -> float:
    """boqili/WAT and silvercherry/BAT adjust_learning_rate(optimizer, epoch + 1): called with the 1-based epoch."""
    lr = 0.1
    if epoch >= 75:
        lr = 0.1 * 0.1
    if epoch >= 90:
        lr = 0.1 * 0.01
    if epoch >= 100:
        lr = 0.1 * 0.001
    return lr


def dafa_bag_of_tricks(epoch: int, epochs: int = 110) -> float:
    """rucy74/DAFA train.py adjust_learning_rate with bag_of_tricks, called with the 1-based epoch:
    0.1, x0.1 once epoch >= epochs - 10 (epoch 100 of 110), x0.01 once epoch >= epochs - 5 (epoch 105)."""
    lr = 0.1
    if epoch >= epochs - 10:
        lr = 0.1 * 0.1
    if epoch >= epochs - 5:
        lr = 0.1 * 0.01
    return lr


def frl_schedule(epoch: int) -> float:
    """frl.toml: 100 epochs of PGD-AT pre-training at 0.1, /10 after 50 and 75 (fairtui's recipe: the authors
    publish none), then hannxu123/fair_robust's fine-tune: a new SGD at 1e-3 and MultiStepLR([40, 80]) stepped
    after every FRL epoch."""
    if epoch <= 100:
        return 0.1 * 0.1 ** bisect.bisect_right([50, 75], epoch - 1)
    return 0.001 * 0.1 ** bisect.bisect_right([40, 80], epoch - 101)


def faal_ft_prn(epoch: int) -> float:
    """TrustAI/FAAL ft_prn.py, 2 epochs: MultiStepLR(milestones=[epochs * 1/2]) stepped after every epoch."""
    return 0.01 if epoch == 1 else 0.001


def absld_schedule(epoch: int) -> float:
    """zhaoshiji123/ABSLD resnet18_absld_cifar10.py: lr 0.1, `if epoch in [215, 260, 285]: lr *= 0.1` after that
    epoch has trained."""
    return 0.1 * 0.1 ** sum(epoch > m for m in (215, 260, 285))


SCHEDULES = {
    "at": cfa_lr_schedule, "trades": cfa_lr_schedule, "cfa-at": cfa_lr_schedule, "cfa-trades": cfa_lr_schedule,
    "cfa-fat": cfa_lr_schedule,
    "tian-trades": cfa_lr_schedule,  # Tian et al. publish no schedule: the CFA setting the TRADES rows share
    "wat": trades_adjust_learning_rate, "bat": trades_adjust_learning_rate,
    "dafa": dafa_bag_of_tricks,
    "frl": frl_schedule, "frl-rw": frl_schedule, "frl-rm": frl_schedule,
    "faal": faal_ft_prn,
    "csr": lambda epoch: 0.001,  # Alexkael/...: 2 epochs at 0.001; its x0.1 at epoch 100 never comes
    "trix": lambda epoch: dafa_bag_of_tricks(epoch, 150),  # Fairness-a11y/TRIX: DAFA's train.py, 150 epochs
    "absld": absld_schedule,
    "absld-teacher": trades_adjust_learning_rate,  # yaodongyu/TRADES train_trades_cifar10.py, 76 epochs
}
PAPER_PROFILES = sorted(p.stem for p in (ROOT / "profiles").glob("*.toml")
                        if not p.stem.startswith(("cifar10-", "digits-", "quickstart")))


def test_every_paper_profile_has_a_hand_written_schedule():
    assert set(PAPER_PROFILES) == set(SCHEDULES)


@pytest.mark.parametrize("name", PAPER_PROFILES)
def test_paper_profile_lr_is_the_authors_in_every_epoch(name):
    profile = load_profile(ROOT / "profiles" / f"{name}.toml")
    method = build_method(MethodContext(10, profile, torch.device("cpu")))
    for epoch in range(1, profile.train.epochs + 1):
        ours = method.lr_for(epoch, lr_at(epoch, profile))
        assert ours == pytest.approx(SCHEDULES[name](epoch), rel=1e-12), f"{name}: epoch {epoch}"


@pytest.mark.parametrize("epochs, expected", [
    (2, [0.01, 0.001]), (4, [0.01, 0.01, 0.001, 0.001]),
    (3, [0.01, 0.001, 0.0001]),  # thirds: milestones 1 and 2
    (5, [0.01] * 5),  # thirds of 5 (1.67, 3.33) are never whole: MultiStepLR never fires
    (6, [0.01] + [0.001] * 5),  # ft_prn.py's [1] for 6, 10 and 20 epochs
])
def test_faal_fine_tune_of_any_length_follows_ft_prn(epochs, expected):
    """ft_prn.py's table of milestones by epoch count, against PyTorch's own MultiStepLR stepped per epoch."""
    from engine.contract.config import Profile, TrainConfig
    from engine.contract.method_params import FAALParams
    from engine.methods.faal import FAAL, ft_prn_milestones

    params = FAALParams(pretrain_epochs=1)
    m = FAAL(params, MethodContext(3, Profile(train=TrainConfig(epochs=epochs + 1, lr=0.1), method=params),
                                   torch.device("cpu")))
    ours = [m.lr_for(e, 0.1) for e in range(2, epochs + 2)]
    assert ours == pytest.approx(expected, rel=1e-12)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.01)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=ft_prn_milestones(epochs), gamma=0.1)
    torchs = []
    for _ in range(epochs):
        torchs.append(scheduler.get_last_lr()[0])
        opt.step()
        scheduler.step()
    assert ours == pytest.approx(torchs, rel=1e-12)
