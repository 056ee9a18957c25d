"""PGD (Madry et al.) for L-inf and L2 with a per-sample eps, and FGSM as its one-step case.

Losses: ``ce``; ``cw`` (max other logit - true logit, clamped at -kappa);
``ce_t`` (CE on logits / T: Tian et al.'s Temperature-PGD, Sec. 5).
Every attack works in [0, 1] pixel space, runs the model in eval mode and
restores its mode (a training attack may keep train mode: ``model_mode``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from engine.attacks.noise import WHOLE, Draws
from engine.runtime.modes import attack_mode

Tensor = torch.Tensor


def cw_margin(logits: Tensor, y: Tensor, kappa: float) -> Tensor:
    """Per-sample CW loss: max_{j != y} z_j - z_y, clamped at -kappa. [B]"""
    true = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf")).amax(1)
    return (other - true).clamp(min=-kappa)


def attack_loss(kind: str, temperature: float = 1.0, kappa: float = 50.0) -> Callable[[Tensor, Tensor], Tensor]:
    """The per-sample loss an attack ascends. [B]"""
    if kind == "ce":
        return lambda z, y: F.cross_entropy(z, y, reduction="none")
    if kind == "ce_t":
        return lambda z, y: F.cross_entropy(z / temperature, y, reduction="none")
    if kind == "cw":
        return lambda z, y: cw_margin(z, y, kappa)
    raise ValueError(f"unknown attack loss {kind!r}")


def as_per_sample(value: float | Tensor, x: Tensor) -> Tensor:
    """A scalar or [B] tensor as a [B, 1, ...] tensor that broadcasts against x."""
    t = torch.as_tensor(value, dtype=x.dtype, device=x.device)
    if t.dim() == 0:
        t = t.expand(x.shape[0])
    return t.view(-1, *([1] * (x.dim() - 1)))


def _l2_norm(v: Tensor) -> Tensor:
    return v.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (v.dim() - 1)))


def project(delta: Tensor, eps: Tensor, norm: str) -> Tensor:
    """Project each sample's perturbation onto its own eps-ball (eps: [B, 1, ...])."""
    if norm == "linf":
        return torch.maximum(torch.minimum(delta, eps), -eps)
    return delta * torch.clamp(eps / _l2_norm(delta), max=1.0)


def ascent_step(delta: Tensor, grad: Tensor, step: Tensor, norm: str) -> Tensor:
    if norm == "linf":
        return delta + step * grad.sign()
    return delta + step * grad / _l2_norm(grad)


def random_start(x: Tensor, eps: Tensor, norm: str, draws: Draws = WHOLE) -> Tensor:
    if norm == "linf":
        return (draws.rand_like(x) * 2 - 1) * eps
    direction = draws.randn_like(x)
    radius = draws.rand_rows(x).view(-1, *([1] * (x.dim() - 1)))
    return direction / _l2_norm(direction) * radius * eps


@dataclass
class PGD:
    """Projected gradient descent. ``perturb(x, y, eps=None)`` -> x_adv.

    ``eps`` (and ``step``) may be overridden per call with a [B] tensor: the
    class-wise methods give every sample its own margin. ``draws``: where the random start comes
    from (a rank's shard of a global batch's draws in a multi-process run).
    """

    model: torch.nn.Module
    eps: float
    step: float
    steps: int
    norm: str = "linf"
    random_start: bool = True
    loss: str = "ce"
    temperature: float = 1.0
    kappa: float = 50.0
    restarts: int = 1
    # FAT (Zhang et al. 2020): a sample's attack stops `early_stop_tau` steps after it is first
    # misclassified. None: every sample takes every step.
    early_stop_tau: int | None = None
    # "fat": Zhang et al.'s rule (a sample stops when it is misclassified with no steps left; while it
    # is classified correctly it moves). "cfa_code": the CFA authors' fat_loss: a sample moves while it
    # has steps left (each misclassified step spends one), so tau = 0 leaves the random start; and a
    # run of all `steps` ends with one more forward at the final point, as their loop makes.
    early_stop_rule: str = "fat"
    # "eval", or "train": keep the model as the training loop left it (BatchNorm on batch statistics,
    # running statistics updated by every attack forward), as the CFA authors' training attacks do.
    model_mode: str = "eval"

    def perturb(self, x: Tensor, y: Tensor, eps: float | Tensor | None = None,
                step: float | Tensor | None = None, draws: Draws = WHOLE) -> Tensor:
        eps_b = as_per_sample(self.eps if eps is None else eps, x)
        step_b = as_per_sample(self.step if step is None else step, x)
        loss_fn = attack_loss(self.loss, self.temperature, self.kappa)
        with attack_mode(self.model, self.model_mode):
            best, best_loss = x.detach(), None
            for _ in range(self.restarts):
                x_adv, loss = self._run(x.detach(), y, eps_b, step_b, loss_fn, draws)
                if best_loss is None:
                    best, best_loss = x_adv, loss
                else:
                    better = loss > best_loss
                    best = torch.where(better.view(-1, *([1] * (x.dim() - 1))), x_adv, best)
                    best_loss = torch.maximum(loss, best_loss)
        return best

    def _run(self, x: Tensor, y: Tensor, eps: Tensor, step: Tensor, loss_fn, draws: Draws
             ) -> tuple[Tensor, Tensor]:
        delta = random_start(x, eps, self.norm, draws) if self.random_start else torch.zeros_like(x)
        delta = (x + delta).clamp(0, 1) - x
        early = self.early_stop_tau is not None
        budget = torch.full_like(y, self.early_stop_tau or 0)
        active = torch.ones_like(y, dtype=torch.bool)
        stopped = False
        for _ in range(self.steps):
            delta.requires_grad_(True)
            logits = self.model(x + delta)
            (grad,) = torch.autograd.grad(loss_fn(logits, y).sum(), delta)
            moved = ascent_step(delta.detach(), grad, step, self.norm)
            moved = (x + project(moved, eps, self.norm)).clamp(0, 1) - x
            if early:
                active, budget = self._early_stop(logits.argmax(1) != y, active, budget)
                moved = torch.where(active.view(-1, *([1] * (x.dim() - 1))), moved, delta.detach())
                # A shard of a multi-process batch takes every step (a no-op once all are stopped):
                # its ranks must run the same number of forwards (SyncBatchNorm in train mode).
                if not draws.lockstep and not active.any():
                    delta, stopped = moved, True
                    break
            delta = moved
        x_adv = (x + delta).detach()
        if early and self.early_stop_rule == "cfa_code" and not stopped and self.steps:
            with torch.no_grad():
                self.model(x_adv)  # their loop's forward after its last step (BatchNorm statistics)
        with torch.no_grad():
            final = loss_fn(self.model(x_adv), y) if self.restarts > 1 else torch.zeros(len(y), device=x.device)
        return x_adv, final

    def _early_stop(self, wrong: Tensor, active: Tensor, budget: Tensor) -> tuple[Tensor, Tensor]:
        """Which samples move this step, and their budgets after it (``early_stop_rule``). [B] each"""
        if self.early_stop_rule == "cfa_code":  # `control > 0` moves; `pred != y` spends one of it
            active = budget > 0
            return active, budget - (wrong & active).long()
        wrong = active & wrong
        return active & ~(wrong & (budget == 0)), torch.where(wrong & (budget > 0), budget - 1, budget)


def FGSM(model: torch.nn.Module, eps: float, norm: str = "linf") -> PGD:
    """One signed-gradient step of size eps from the clean input."""
    return PGD(model, eps=eps, step=eps, steps=1, norm=norm, random_start=False)
