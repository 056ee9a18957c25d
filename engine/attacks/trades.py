"""The TRADES attack (Zhang et al. 2019): maximise KL(f(x) || f(x')) inside the eps-ball."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.pgd import as_per_sample, ascent_step, project
from engine.runtime.modes import attack_mode


def trades_kl(logits_adv: torch.Tensor, logits_clean: torch.Tensor, form: str = "log_space") -> torch.Tensor:
    """Per-sample KL(f(x) || f(x')) summed over classes. [B]

    ``form = "textbook"``: ``kl_div(log_softmax(adv), softmax(clean))``, the authors' codes' arithmetic
    (TRADES, CFA, FRL, WAT, DAFA, FAAL, BAT, CSR), selected by ``attack.kl`` or a method's ``form = "code"``.

    Both distributions stay in log space (``log_target=True``). The textbook form
    ``kl_div(log_softmax(adv), softmax(clean))`` differentiates through
    ``softmax(clean)``: once a logit gap passes about 104 (fp32), that softmax
    underflows to exactly 0, the backward pass of p * log(p) at p = 0 is 0 * -inf,
    and the gradient becomes NaN while the loss is still finite (ResNet-18 at lr 0.1
    reaches such logits in its first batches on CIFAR-10). Here the gradient is
    exp(log p) * (log p - log q + 1), which is finite for any finite logits.

    The same function as the textbook form, rounded differently, and the sign of a TRADES step follows
    the rounding where the gradient is near zero: in float32 2% of the adversarial pixels differ for a
    confident trained model, 6-8% for an untrained small CNN and 18% for an untrained PreAct-ResNet18 at
    1/8 width (docs/profiles-and-methods.md).
    """
    if form == "textbook":
        return F.kl_div(F.log_softmax(logits_adv, 1), F.softmax(logits_clean, 1), reduction="none").sum(1)
    return F.kl_div(F.log_softmax(logits_adv, 1), F.log_softmax(logits_clean, 1), reduction="none",
                    log_target=True).sum(1)


@dataclass
class TRADESAttack:
    """x' = x + 0.001 * N(0, 1) (not clamped to [0, 1]), then ``steps`` ascent steps on the KL, each
    projected onto the sample's eps-ball and [0, 1]."""

    model: torch.nn.Module
    eps: float
    step: float
    steps: int
    norm: str = "linf"
    model_mode: str = "eval"  # "train": keep the loop's train mode (see PGD.model_mode)
    kl: str = "log_space"  # trades_kl's form

    def perturb(self, x: torch.Tensor, y: torch.Tensor | None = None, eps: float | torch.Tensor | None = None,
                step: float | torch.Tensor | None = None, draws: Draws = WHOLE) -> torch.Tensor:
        eps_b = as_per_sample(self.eps if eps is None else eps, x)
        step_b = as_per_sample(self.step if step is None else step, x)
        x = x.detach()
        with attack_mode(self.model, self.model_mode):
            with torch.no_grad():
                p_clean = self.model(x)
            # The first gradient is taken at x + 0.001 N(0, 1) as it is, neither clamped to [0, 1] nor
            # projected, as in TRADES and the CFA, FRL and WAT codes: every step's projection then
            # keeps x' in the eps-ball and in [0, 1].
            delta = 0.001 * draws.randn_like(x)
            for _ in range(self.steps):
                delta.requires_grad_(True)
                kl = trades_kl(self.model(x + delta), p_clean, self.kl).sum()
                (grad,) = torch.autograd.grad(kl, delta)
                delta = ascent_step(delta.detach(), grad, step_b, self.norm)
                delta = (x + project(delta, eps_b, self.norm)).clamp(0, 1) - x
        return (x + project(delta, eps_b, self.norm)).clamp(0, 1).detach()  # (a no-op after any step)


@dataclass
class StoppingTRADESAttack:
    """BAT's two early-stopped TRADES attacks (docs/reference/methods-bat-csr.md; the authors'
    stop_to_lastclean.py and stop_to_firstadv.py, themselves after FAT's code). From clip(x + 0.001 N(0, 1),
    0, 1), at most ``steps`` ascent steps on KL(f(x) || f(x')) (f(x) in the attack's mode, at the start),
    each projected onto the eps-ball and [0, 1]; before every step each sample still stepping is checked:

    - ``rule = "last_clean"``: a sample predicted wrong is output with its *previous* iterate (the last one
      predicted right; the start itself for a sample wrong at the start) and stops;
    - ``rule = "first_adv"``: a sample predicted wrong with its counter at 0 is output with its current iterate
      and stops; one predicted wrong with a counter above 0 spends one and steps on (FAT's tau; the
      authors' BAT uses tau = 1).

    After the last step the samples still stepping are output with their last iterate, which is not checked.
    Vectorised over the batch (only the samples still stepping go through the model, as in the loops), each
    output in its sample's row. The model's mode during the attack: ``model_mode`` (BAT: eval)."""

    model: torch.nn.Module
    eps: float
    step: float
    steps: int
    rule: str = "first_adv"
    tau: int = 1
    norm: str = "linf"
    model_mode: str = "eval"
    kl: str = "log_space"  # trades_kl's form

    def perturb(self, x: torch.Tensor, y: torch.Tensor, draws: Draws = WHOLE) -> torch.Tensor:
        if self.rule not in ("last_clean", "first_adv"):
            raise ValueError(f"unknown stopping rule {self.rule!r}")
        x = x.detach()
        eps_b, step_b = as_per_sample(self.eps, x), as_per_sample(self.step, x)
        with attack_mode(self.model, self.model_mode):
            with torch.no_grad():
                p_clean = self.model(x)
            adv = (x + 0.001 * draws.randn_like(x)).clamp(0, 1)
            out = adv.clone()
            previous = adv.clone()  # the last iterate each sample was predicted right at (last_clean)
            stepping = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
            counter = torch.full((x.shape[0],), self.tau, dtype=torch.long, device=x.device)
            for _ in range(self.steps):
                idx = stepping.nonzero().squeeze(1)
                if idx.numel() == 0:
                    break
                a = adv[idx].requires_grad_(True)
                logits = self.model(a)
                wrong = logits.argmax(1) != y[idx]
                if self.rule == "last_clean":
                    stop = wrong
                    out[idx[stop]] = previous[idx[stop]]
                else:
                    stop = wrong & (counter[idx] == 0)
                    counter[idx[wrong & ~stop]] -= 1
                    out[idx[stop]] = a.detach()[stop]
                stepping[idx[stop]] = False
                go = ~stop
                if not go.any():
                    break
                (grad,) = torch.autograd.grad(trades_kl(logits, p_clean[idx], self.kl).sum(), a)
                moved = idx[go]
                previous[moved] = a.detach()[go]
                delta = ascent_step((a.detach() - x[idx])[go], grad[go], step_b[moved], self.norm)
                adv[moved] = (x[moved] + project(delta, eps_b[moved], self.norm)).clamp(0, 1)
            out[stepping] = adv[stepping]
        return out.detach()
