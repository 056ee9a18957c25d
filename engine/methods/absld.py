"""ABSLD: Anti-Bias Soft Label Distillation (Zhao, Duan, Wang and Wei, NeurIPS 2024).

A student learns a frozen robust teacher's soft labels (engine.methods.teacher) with a temperature per class, one
set for the adversarial term and one for the clean term (docs/reference/methods-trix-absld.md; the authors' code
zhaoshiji123/ABSLD, ``resnet18_absld_cifar10.py`` and ``absld_loss.py``). Per batch, with t = f_T(x) the teacher's
logits of the clean images (eval mode, no gradient) and T^adv, T^nat the temperatures:

    soft labels   q^adv_i = sigma(t_i / T^adv_{y_i}),  q^nat_i = sigma(t_i / T^nat_{y_i})
    attack        x' from x + 0.001 N(0, I): ``steps`` ascent steps on sum_i KL(q^adv_i || sigma(f(x'_i))) by
                  alpha sign(grad), each projected onto the eps ball and [0, 1] (the student in eval mode)
    loss          w KL(q^adv || f(x')) + (1 - w) KL(q^nat || f(x)), each sample's KL averaged over the batch,
                  w = ``adv_weight`` (5/6); the adversarial forward first

After every epoch, for each set apart, with L_k the epoch's summed CE of class k's training predictions (the loss's
train-mode forwards, adversarial for T^adv, clean for T^nat):

    T_k <- clamp(T_k - r (L_k - mean L) / max_j |L_j - mean L|, temp_min, temp_max)

so that a class whose loss is above the mean gets sharper labels. r is ``temp_rate`` times ``temp_rate_decay``
for every lr milestone up to and including the epoch (the code multiplies it at epochs 215, 260 and 285, before
that epoch's update). A gap of zero everywhere moves nothing (the code would divide by zero).

``form = "code"`` where the code's arithmetic differs from the rule above: its two tempered copies of t are
views of one tensor, so the in-place divisions compound and both terms learn sigma(t / (T^adv T^nat)); its KL is
-b log(softmax(s)) + b log(b + 1e-5) averaged over the B x K elements (torch.mean): the KL divided by K, so that
its step is K times smaller than the KL's at one lr (the gradient is the KL's / K; the value is off by the 1e-5).
The scaled profiles take the paper's form: their lr is the protocol's, chosen for losses of a CE's size.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.pgd import as_per_sample, project
from engine.contract.method_params_recent import ABSLDParams
from engine.methods.base import Method, MethodContext, StepOutput, ValResult
from engine.methods.teacher import check_same_teacher, load_teacher
from engine.runtime.modes import attack_mode

Tensor = torch.Tensor


def tempered_targets(teacher_logits: Tensor, y: Tensor, temp_adv: Tensor, temp_nat: Tensor,
                     form: str = "paper") -> tuple[Tensor, Tensor]:
    """The teacher's tempered logits for the adversarial and the clean term. [B, K] each"""
    t_adv, t_nat = temp_adv.to(teacher_logits)[y, None], temp_nat.to(teacher_logits)[y, None]
    if form == "code":
        both = teacher_logits / t_adv / t_nat
        return both, both
    return teacher_logits / t_adv, teacher_logits / t_nat


def distill_kl(student_logits: Tensor, target_logits: Tensor, form: str = "paper") -> Tensor:
    """KL(sigma(target) || sigma(student)): "paper", each sample's KL (summed over the classes) averaged over the
    batch; "code", the code's elementwise kl_loss averaged over the B x K elements, the KL / K (a scalar)."""
    if form == "code":
        b = F.softmax(target_logits, 1)
        return (-torch.log(F.softmax(student_logits, 1)) * b + torch.log(b + 1e-5) * b).mean()
    return F.kl_div(F.log_softmax(student_logits, 1), F.log_softmax(target_logits, 1), reduction="none",
                    log_target=True).sum(1).mean()


def absld_attack(model: torch.nn.Module, x: Tensor, target_logits: Tensor, eps: float, step: float, steps: int,
                 draws: Draws = WHOLE, mode: str = "eval") -> Tensor:
    """x' maximising sum_i KL(sigma(target_i) || sigma(f(x'_i))) from x + 0.001 N(0, I) (absld_inner_loss)."""
    eps_b, step_b = as_per_sample(eps, x), as_per_sample(step, x)
    x = x.detach()
    q = F.softmax(target_logits.detach(), 1)
    with attack_mode(model, mode):
        delta = 0.001 * draws.randn_like(x)
        for _ in range(steps):
            delta.requires_grad_(True)
            kl = F.kl_div(F.log_softmax(model(x + delta), 1), q, reduction="sum")
            (grad,) = torch.autograd.grad(kl, delta)
            delta = delta.detach() + step_b * grad.sign()
            delta = (x + project(delta, eps_b, "linf")).clamp(0, 1) - x
    return (x + delta).detach()


def temperature_step(temp: Tensor, class_loss: Tensor, rate: float, low: float, high: float) -> Tensor:
    """One epoch's move of a set of temperatures against its classes' loss gaps to their mean. [K] float64"""
    gap = class_loss.double() - class_loss.double().mean()
    scale = gap.abs().max()
    if scale == 0:
        return temp.clone()
    return (temp - rate * gap / scale).clamp(low, high)


class ABSLD(Method):
    name = "absld"

    def __init__(self, params: ABSLDParams, ctx: MethodContext):
        super().__init__(params, ctx)
        self.p: ABSLDParams = params.resolved()
        if ctx.attack.norm != "linf":
            from engine.contract.profile_schema import ProfileError

            raise ProfileError("profile", "attack.norm", "ABSLD's attack is the authors' L-inf PGD; got "
                               + ctx.attack.norm)
        self._teacher: tuple[torch.nn.Module, dict[str, Any]] | None = None  # loaded at the run's start (teacher)
        k, dev = ctx.num_classes, ctx.device
        self.temp_adv = torch.full((k,), self.p.temp_init, dtype=torch.float64)
        self.temp_nat = torch.full((k,), self.p.temp_init, dtype=torch.float64)
        self.trained_with: dict[str, list[float]] = {}
        self.loss_adv = torch.zeros(k, dtype=torch.float64, device=dev)  # the epoch's summed CE per class
        self.loss_nat = torch.zeros(k, dtype=torch.float64, device=dev)
        self.measured: dict[str, Any] = {}

    @property
    def teacher(self) -> torch.nn.Module:
        return self._loaded()[0]

    @property
    def teacher_record(self) -> dict[str, Any]:
        return self._loaded()[1]

    def _loaded(self) -> tuple[torch.nn.Module, dict[str, Any]]:
        """The teacher and its record, loaded once: when the run starts (`run_started` records it) or resumes (its
        SHA-256 checked against the checkpoint's), never when the method is only built (a schedule's check)."""
        if self._teacher is None:
            self._teacher = load_teacher(self.p.teacher, self.ctx)
        return self._teacher

    def run_record(self) -> dict[str, Any]:
        return {"teacher": self.teacher_record}

    def rate_at(self, epoch: int) -> float:
        """r of epoch ``epoch``'s update: temp_rate x temp_rate_decay per lr milestone up to ``epoch``."""
        t = self.ctx.profile.train
        drops = sum(epoch >= m for m in t.milestones) if t.schedule == "piecewise" else 0
        return self.p.temp_rate * self.p.temp_rate_decay ** drops

    # -- per batch ------------------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        a, form = self.ctx.attack, self.p.form
        with torch.no_grad():
            teacher_logits = self.teacher(x)
            teacher_logits = teacher_logits.to(torch.promote_types(teacher_logits.dtype, torch.float32))  # not bf16
        target_adv, target_nat = tempered_targets(teacher_logits, y, self.temp_adv, self.temp_nat, form)
        x_adv = absld_attack(self.ctx.attack_model, x, target_adv, a.eps, a.step, a.steps, draws,
                             self.ctx.training_attack_mode)
        logits_adv = model(x_adv)
        logits_clean = model(x)
        w = self.p.adv_weight
        loss = w * distill_kl(logits_adv, target_adv, form) + (1 - w) * distill_kl(logits_clean, target_nat, form)
        with torch.no_grad():
            self.loss_adv.index_add_(0, y, F.cross_entropy(logits_adv.detach().double(), y, reduction="none"))
            self.loss_nat.index_add_(0, y, F.cross_entropy(logits_clean.detach().double(), y, reduction="none"))
        return StepOutput(loss, logits_adv.detach(), logits_clean.detach())

    # -- between epochs -------------------------------------------------------------------------
    def start_epoch(self, epoch: int, val: ValResult | None) -> None:
        self.loss_adv.zero_()
        self.loss_nat.zero_()
        self.measured = {}
        self.trained_with = {"temperature_adv": self.temp_adv.tolist(), "temperature_nat": self.temp_nat.tolist()}

    def end_epoch(self, epoch: int, model: torch.nn.Module, train_robust_acc: list[float | None],
                  val: ValResult) -> None:
        sums_adv, sums_nat = self.loss_adv.clone(), self.loss_nat.clone()
        if self.ctx.group is not None:
            self.ctx.group.sum_(sums_adv, sums_nat)
        sums_adv, sums_nat = sums_adv.cpu(), sums_nat.cpu()
        rate = self.rate_at(epoch)
        self.temp_adv = temperature_step(self.temp_adv, sums_adv, rate, self.p.temp_min, self.p.temp_max)
        self.temp_nat = temperature_step(self.temp_nat, sums_nat, rate, self.p.temp_min, self.p.temp_max)
        self.measured = {"class_loss_adv": sums_adv.tolist(), "class_loss_nat": sums_nat.tolist(), "temp_rate": rate,
                         "next_temperature_adv": self.temp_adv.tolist(),
                         "next_temperature_nat": self.temp_nat.tolist()}

    def method_state(self) -> dict[str, Any]:
        return {"phase": "distil", **self.trained_with}

    def measurements(self) -> dict[str, Any]:
        return self.measured

    # -- checkpoint -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "temp_adv": self.temp_adv, "temp_nat": self.temp_nat,
                "teacher_sha256": self.teacher_record["sha256"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        check_same_teacher(state.get("teacher_sha256"), self.teacher_record)
        self.temp_adv, self.temp_nat = state["temp_adv"].cpu().double(), state["temp_nat"].cpu().double()

    def batch_state(self) -> dict[str, Tensor]:
        return {"loss_adv": self.loss_adv, "loss_nat": self.loss_nat}
