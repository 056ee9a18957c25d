"""Evaluation attacks by name: clean, fgsm, pgd<N>, cw<N>, tpgd<N>, aa, aa-fast.

``build_attack(name, model, settings)`` returns an object with
``perturb(x, y, draws=WHOLE) -> x_adv``; the registry maps a name's family to its builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.pgd import FGSM, PGD
from engine.contract.request import parse_attack



@dataclass(frozen=True)
class AttackSettings:
    """What the named attacks share: the threat model and the papers' knobs."""

    eps: float
    step: float
    norm: str = "linf"
    cw_kappa: float = 50.0
    tpgd_inv_temperature: float = 5.0
    restarts: int = 1
    seed: int = 0

    def result_setting(self, attack: str, n_per_class: int, batch_size: int) -> dict:
        """The `setting` an `eval_result` of ``attack`` under these settings records (engine.contract.results)."""
        from engine.contract.results import attack_setting

        return attack_setting(attack, eps=self.eps, norm=self.norm, step=self.step, restarts=self.restarts,
                              cw_kappa=self.cw_kappa, tpgd_inv_temperature=self.tpgd_inv_temperature,
                              seed=self.seed, n_per_class=n_per_class, batch_size=batch_size)


class Clean:
    def perturb(self, x: torch.Tensor, y: torch.Tensor, draws: Draws = WHOLE) -> torch.Tensor:
        return x


def _pgd(loss: str) -> Callable:
    def build(model: torch.nn.Module, s: AttackSettings, steps: int) -> PGD:
        return PGD(model, eps=s.eps, step=s.step, steps=steps, norm=s.norm, loss=loss, kappa=s.cw_kappa,
                   temperature=1.0 / s.tpgd_inv_temperature, restarts=s.restarts)
    return build


def _autoattack(fast: bool) -> Callable:
    def build(model: torch.nn.Module, s: AttackSettings, steps: int):
        from engine.attacks.autoattack import AutoAttackAdapter

        return AutoAttackAdapter(model, s, fast=fast)
    return build


ATTACKS: dict[str, Callable] = {
    "clean": lambda model, s, steps: Clean(),
    "fgsm": lambda model, s, steps: FGSM(model, s.eps, s.norm),
    "pgd": _pgd("ce"),
    "cw": _pgd("cw"),
    "tpgd": _pgd("ce_t"),
    "aa": _autoattack(fast=False),
    "aa-fast": _autoattack(fast=True),
}


def parse_attack_name(name: str) -> tuple[str, int]:
    """'pgd20' -> ('pgd', 20); 'cw' -> ('cw', 20); 'aa' -> ('aa', 0) (engine.contract's grammar)."""
    return parse_attack(name)


def build_attack(name: str, model: torch.nn.Module, settings: AttackSettings):
    family, steps = parse_attack_name(name)
    return ATTACKS[family](model, settings, steps)
