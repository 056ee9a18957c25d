"""Inverse-robustness re-weighting on PGD-AT: an example of a fairtui method in its own package.

After every epoch, each class's weight becomes proportional to the inverse of its validation robust
accuracy (floored at ``floor``), normalised to mean 1, and smoothed with ``momentum``:

    w_k <- momentum * w_k + (1 - momentum) * K * (1 / max(a_k, floor)) / sum_j (1 / max(a_j, floor))

and the next epoch trains with the loss (1/B) sum_i w_{y_i} CE(f(x'_i), y_i) on PGD examples x'.
A class without validation samples keeps its weight. (A plain re-weighting baseline, in the family
of FRL's "Baseline Reweight"; it is here to show the interface, not as a recommended method.)
"""

from __future__ import annotations

from typing import Any

import torch

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.pgd import PGD
from engine.contract.method_params import MethodParams
from engine.methods.base import Method, MethodContext, StepOutput, ValResult, ce_per_sample
from fairtui_irw.params import IRWParams


class InverseRobustnessReweighting(Method):
    name = "irw_at"
    params = IRWParams

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        self.p: IRWParams = params  # type: ignore[assignment]
        a = ctx.attack  # the profile's [attack]: the training attack
        self.attack = PGD(ctx.attack_model, eps=a.eps, step=a.step, steps=a.steps, norm=a.norm,
                          random_start=a.random_start, model_mode=ctx.training_attack_mode)

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, draws: Draws = WHOLE) -> StepOutput:
        x_adv = self.attack.perturb(x, y, draws=draws)
        logits_adv = model(x_adv)
        loss = (self.weight_nat[y] * ce_per_sample(logits_adv, y)).mean()
        return StepOutput(loss, logits_adv.detach(), None)

    def start_epoch(self, epoch: int, val: ValResult | None) -> None:
        if val is None:  # the first epoch: nothing measured yet, every weight 1
            return
        acc = val.robust_acc_per_class
        seen = torch.tensor([a is not None for a in acc])
        inv = torch.tensor([1.0 / max(a, self.p.floor) if a is not None else 0.0 for a in acc])
        target = len(acc) * inv / inv.sum()
        w = self.weight_nat.cpu()
        new = torch.where(seen, self.p.momentum * w + (1 - self.p.momentum) * target, w)
        self.weight_nat.copy_(new.to(self.weight_nat))

    def method_state(self) -> dict[str, Any]:
        return {"class_weight": self.weight_nat.tolist()}
