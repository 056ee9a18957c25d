"""TRIX: Trading Adversarial Fairness via Mixed Adversarial Training (Medi, Jung and Keuper, 2025), on DAFA.

TRIX is DAFA on TRADES (engine.methods.dafa: its warm-up, class weights W, margins W_y eps, steps W_y alpha and
W_y on the natural CE) with each batch's attack mixed, as the authors' code trains it (Fairness-a11y/TRIX,
losses.py ``mixed_trades_loss``; docs/reference/methods-trix-absld.md):

1. The batch's clean predictions in the attack's mode, p = sigma(f(x)), give each class present in the batch its
   mean P_i = mean over the batch's class-i samples of p, with 1e-8 on the diagonal (the code's
   ``calculate_class_weights_from_clean``), and DAFA's rule on them (lambda 1, ties subtracting: the code's
   branch) a weight V_i. A sample is *targeted* when V_{y_i} is below the batch's mean of V_{y_j} over its samples:
   its class is a strong one. Lambda scales every V - 1 alike, so the mask does not depend on it.
2. A targeted sample's target t_i is drawn uniformly among the other classes (the code redraws until t_i != y_i).
3. From x' = x + 0.001 N(0, I), each of the attack's steps moves a targeted sample down the gradient of
   CE(f(x'), t) and an untargeted one up that of KL(f(x) || f(x')) (TRADES's), by W_y alpha times the sign,
   then projects onto the W_y eps ball and [0, 1].

The outer loss is DAFA's on TRADES: (1/B) sum_i W_{y_i} CE(f(x_i), y_i) + beta (1/B) sum_i KL(f(x_i) || f(x'_i)),
the adversarial forward first. The paper's own equations were not at hand to set beside the code (only its
abstract): there is no TRIX-specific ``form``; DAFA's ``form`` keeps its meaning.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.pgd import as_per_sample, project
from engine.attacks.trades import trades_kl
from engine.contract.method_params_recent import TRIXParams
from engine.methods.base import MethodContext
from engine.methods.dafa import DAFA, dafa_weights
from engine.runtime.modes import attack_mode

Tensor = torch.Tensor
DIAGONAL = 1e-8  # the code's epsilon on the class-mean matrix's diagonal


def clean_class_weights(probs: Tensor, y: Tensor, k: int) -> Tensor:
    """V: DAFA's weights (lambda 1, ties subtracting) of the batch's class-mean clean softmax, 1e-8 on its
    diagonal; a class absent from the batch has a zero row and keeps 1. [K] float64"""
    probs = probs.double()
    one_hot = torch.nn.functional.one_hot(y, k).double()  # [B, K]: each class's samples
    P = (one_hot.T @ probs) / one_hot.sum(0).clamp_min(1)[:, None]
    P = P + DIAGONAL * torch.eye(k, dtype=torch.float64, device=probs.device)
    return dafa_weights(P, 1.0, tie_rule="subtract")


def targeted_mask(probs: Tensor, y: Tensor, k: int) -> Tensor:
    """Whether each sample is attacked toward a target: its class's clean weight V below the batch's mean. [B]"""
    v = clean_class_weights(probs, y, k)[y]
    return v < v.mean()


def other_classes(y: Tensor, k: int, u: Tensor) -> Tensor:
    """A class other than y_i for each sample, uniform among the k - 1 from u_i in [0, 1). [B] long"""
    shift = 1 + (u.double() * (k - 1)).floor().long().clamp(max=k - 2)
    return (y + shift) % k


def mixed_trades_attack(model: torch.nn.Module, x: Tensor, y: Tensor, k: int, eps_y: Tensor, step_y: Tensor,
                        steps: int, kl: str = "log_space", draws: Draws = WHOLE, mode: str = "eval",
                        targeted: bool = True) -> tuple[Tensor, Tensor]:
    """TRIX's attack (module docstring, 1-3): the adversarial examples and the targeted mask. [B, ...], [B] bool"""
    eps_b, step_b = as_per_sample(eps_y, x), as_per_sample(step_y, x)
    x = x.detach()
    with attack_mode(model, mode):
        with torch.no_grad():
            logits_clean = model(x)
        delta = 0.001 * draws.randn_like(x)
        u = draws.rand_rows(x)
        mask = (targeted_mask(torch.softmax(logits_clean, 1), y, k) if targeted
                else torch.zeros_like(y, dtype=torch.bool))
        target = torch.where(mask, other_classes(y, k, u), y)
        direction = torch.where(mask, -1.0, 1.0).to(x.dtype)
        m = mask.to(x.dtype)
        for _ in range(steps):
            delta.requires_grad_(True)
            logits = model(x + delta)
            loss = (m * F.cross_entropy(logits, target, reduction="none")
                    + (1 - m) * trades_kl(logits, logits_clean, kl)).sum()
            (grad,) = torch.autograd.grad(loss, delta)
            delta = delta.detach() + step_b * as_per_sample(direction, x) * grad.sign()
            delta = (x + project(delta, eps_b, "linf")).clamp(0, 1) - x
    return (x + delta).detach(), mask


class TRIX(DAFA):
    name = "trix"

    def __init__(self, params: TRIXParams, ctx: MethodContext):
        super().__init__(params, ctx)
        k, dev = ctx.num_classes, ctx.device
        self.targeted_counts = torch.zeros(k, dtype=torch.float64, device=dev)  # the epoch's, per class
        self.sample_counts = torch.zeros(k, dtype=torch.float64, device=dev)

    def trades_adversary(self, x: Tensor, y: Tensor, eps: Tensor, step: Tensor | float, draws: Draws) -> Tensor:
        a, attack = self.ctx.attack, self.base.attack
        step_y = step if isinstance(step, Tensor) else torch.full_like(eps, step)
        x_adv, mask = mixed_trades_attack(attack.model, x, y, self.ctx.num_classes, eps, step_y, a.steps,
                                          self.ctx.kl, draws, attack.model_mode, self.p.targeted)
        with torch.no_grad():
            self.targeted_counts.index_add_(0, y, mask.double())
            self.sample_counts.index_add_(0, y, torch.ones_like(y, dtype=torch.float64))
        return x_adv

    def start_epoch(self, epoch: int, val: Any) -> None:
        super().start_epoch(epoch, val)
        self.targeted_counts.zero_()
        self.sample_counts.zero_()

    def targeted_share(self) -> list[float | None]:
        counts, total = self.targeted_counts.clone(), self.sample_counts.clone()
        if self.ctx.group is not None:
            self.ctx.group.sum_(counts, total)
        return [float(c / n) if n > 0 else None for c, n in zip(counts.cpu(), total.cpu())]

    def measurements(self) -> dict[str, Any]:
        return {**super().measurements(), "targeted_share": self.targeted_share()}

    def never_acted(self, epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        shares = [s for e in epochs for s in (e.get("method_state") or {}).get("targeted_share") or () if s]
        if not self.p.targeted or shares:
            return []
        return [{"mechanism": "trix targets", "checkpoint": None,
                 "reason": "no training sample was attacked toward a target in any epoch: the run is DAFA"}]

    def batch_state(self) -> dict[str, Tensor]:
        return {**super().batch_state(), "targeted_counts": self.targeted_counts, "sample_counts": self.sample_counts}
