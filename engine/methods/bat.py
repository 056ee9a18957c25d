"""BAT: Balance Adversarial Training (Sun et al., AAAI 2023), as its authors' code trains it.

docs/reference/methods-bat-csr.md gives the rule with the lines of the authors' code; in short, per batch:

- two early-stopped TRADES attacks in eval mode (engine.attacks.trades.StoppingTRADESAttack): x_lc, the last
  iterate still classified right, and x_fa, the iterate ``firstadv_tau`` steps past the first misclassified
  one;
- three train-mode forwards, in the code's order (BatchNorm's running statistics follow them): f(x_lc),
  f(x_fa), f(x);
- L = CE(f(x_lc), y) + beta KL(f(x) || f(x_fa)) + uniform_weight (KL(f(x_lc) || u) + KL(f(x_fa) || u)),
  each term a batch mean, u the uniform distribution.

BAT keeps no class-wise state: its "source-class" and "target-class" fairness act per sample.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.trades import StoppingTRADESAttack, trades_kl
from engine.contract.method_params import MethodParams
from engine.contract.method_params_recent import BATParams
from engine.methods.base import Method, MethodContext, StepOutput, ce_per_sample

Tensor = torch.Tensor


def kl_to_uniform(logits: Tensor) -> Tensor:
    """Per-sample KL(f(x) || u) = sum_k p_k ln p_k + ln K: how far a prediction is from the uniform one. [B]"""
    log_p = F.log_softmax(logits, 1)
    return (log_p.exp() * log_p).sum(1) + math.log(logits.shape[1])


class BAT(Method):
    name = "bat"

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        assert isinstance(params, BATParams)
        self.p: BATParams = params
        a = ctx.attack
        common = dict(eps=a.eps, step=a.step, steps=a.steps, norm=a.norm, model_mode=ctx.training_attack_mode,
                      kl=ctx.kl)
        self.last_clean = StoppingTRADESAttack(ctx.attack_model, rule="last_clean", **common)  # type: ignore[arg-type]
        self.first_adv = StoppingTRADESAttack(ctx.attack_model, rule="first_adv", tau=params.firstadv_tau,
                                              **common)  # type: ignore[arg-type]

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        x_lc = self.last_clean.perturb(x, y, draws=draws)  # the code's order: last clean, then first adversarial
        x_fa = self.first_adv.perturb(x, y, draws=draws)
        logits_lc = model(x_lc)
        logits_fa = model(x_fa)
        logits_clean = model(x)
        natural = ce_per_sample(logits_lc, y)
        robust = self.p.beta * trades_kl(logits_fa, logits_clean, self.ctx.kl)
        uniform = self.p.uniform_weight * (kl_to_uniform(logits_lc) + kl_to_uniform(logits_fa))
        loss = (natural + robust + uniform).mean()
        return StepOutput(loss, logits_fa.detach(), logits_clean.detach(),
                          {"ce": natural.detach(), "kl": robust.detach(), "uniform": uniform.detach()})

    def method_state(self) -> dict[str, Any]:
        return {}
