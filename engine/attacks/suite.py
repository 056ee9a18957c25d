"""Evaluation attacks by name (engine.contract.attacks: clean, fgsm, pgd<N>, cw<N>, tpgd<N>, aa, aa-fast).

``build_attack(name, model, settings)`` returns an object with ``perturb(x, y, draws=WHOLE) -> x_adv``,
from the builder its row of the attack table names.
"""

from __future__ import annotations

from dataclasses import dataclass
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

    def result_setting(self, attack: str, n_per_class: int, batch_size: int, split_per_class: int = 0) -> dict:
        """The `setting` an `eval_result` of ``attack`` under these settings records (engine.contract.results)."""
        from engine.contract.results import attack_setting

        return attack_setting(attack, eps=self.eps, norm=self.norm, step=self.step, restarts=self.restarts,
                              cw_kappa=self.cw_kappa, tpgd_inv_temperature=self.tpgd_inv_temperature,
                              seed=self.seed, n_per_class=n_per_class, batch_size=batch_size,
                              split_per_class=split_per_class)


class Clean:
    def perturb(self, x: torch.Tensor, y: torch.Tensor, draws: Draws = WHOLE) -> torch.Tensor:
        return x


# The builders of the attack table's rows (engine.contract.attacks): builder(model, settings, steps).

def build_clean(model: torch.nn.Module, s: AttackSettings, steps: int) -> Clean:
    return Clean()


def build_fgsm(model: torch.nn.Module, s: AttackSettings, steps: int) -> FGSM:
    return FGSM(model, s.eps, s.norm)


def _pgd(model: torch.nn.Module, s: AttackSettings, steps: int, loss: str) -> PGD:
    return PGD(model, eps=s.eps, step=s.step, steps=steps, norm=s.norm, loss=loss, kappa=s.cw_kappa,
               temperature=1.0 / s.tpgd_inv_temperature, restarts=s.restarts)


def build_pgd(model: torch.nn.Module, s: AttackSettings, steps: int) -> PGD:
    return _pgd(model, s, steps, "ce")


def build_cw(model: torch.nn.Module, s: AttackSettings, steps: int) -> PGD:
    return _pgd(model, s, steps, "cw")


def build_tpgd(model: torch.nn.Module, s: AttackSettings, steps: int) -> PGD:
    return _pgd(model, s, steps, "ce_t")


def _autoattack(model: torch.nn.Module, s: AttackSettings, fast: bool):
    from engine.attacks.autoattack import AutoAttackAdapter

    return AutoAttackAdapter(model, s, fast=fast)


def build_aa(model: torch.nn.Module, s: AttackSettings, steps: int):
    return _autoattack(model, s, fast=False)


def build_aa_fast(model: torch.nn.Module, s: AttackSettings, steps: int):
    return _autoattack(model, s, fast=True)


def parse_attack_name(name: str) -> tuple[str, int]:
    """'pgd20' -> ('pgd', 20); 'cw' -> ('cw', 20); 'aa' -> ('aa', 0) (engine.contract's grammar)."""
    return parse_attack(name)


def build_attack(name: str, model: torch.nn.Module, settings: AttackSettings):
    """The attack ``name`` names, from its row of the attack table (engine.contract.attacks)."""
    import importlib

    from engine.contract.attacks import find

    parse_attack(name)  # a RequestError for a name the table does not admit
    attack, steps = find(name)
    module, function = attack.builder.split(":")
    return getattr(importlib.import_module(module), function)(model, settings, steps)
