"""FRL: Fair Robust Learning (Xu, Liu, Li, Jain, Tang, ICML 2021), Sec. 4 and Algorithm 1.

Between epochs, on the validation split (PGD-20 at eps, measured by the loop):
    clean_err_k = 1 - clean_acc_k,  bndy_err_k = clean_acc_k - robust_acc_k
    gamma_nat_k  = clean_err_k - mean(clean_err) - tau1
    gamma_bndy_k = bndy_err_k  - mean(bndy_err)  - tau2
Reweight (Algorithm 1, steps 7-8): lambda_nat += alpha1 gamma_nat, lambda_bndy += alpha2 gamma_bndy,
each projected onto {lambda >= 0, sum(lambda) <= cap}; w_k = 1/K + lambda_k - sum(lambda)/K.
Remargin (Eq. 11, as a multiplier): lambda_margin += alpha_margin gamma_bndy,
eps_k = eps * clamp(exp(lambda_margin_k), floor, cap) (or the authors' code form).
Loss: sum(w_nat[y] CE) / sum(w_nat[y]) + beta * sum(w_bndy[y] KL) / sum(w_bndy[y]).

`form = "code"` (FRL_FORMS) gives the authors' values: alpha2 = 0.1 (their rate1 * 2),
alpha_margin = 0.2 (rate2), tau 0.1 for Reweight (frlrw.py) and 0.07 otherwise (frlrmrw.py),
exp(2 lambda) margins, and alpha1 / alpha2 halved every 40 fine-tuning epochs with alpha_margin fixed.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.attacks.noise import WHOLE, Draws
from engine.contract.mechanisms import frl_alpha_scale
from engine.contract.method_params import FRLParams, MethodParams
from engine.methods.base import MethodContext, StepOutput, ValResult
from engine.methods.standard import TRADES, FineTunePhase

Tensor = torch.Tensor


def project_multipliers(lam: Tensor, cap: float) -> Tensor:
    """Clamp at >= 0; if the sum exceeds ``cap``, rescale to sum to ``cap`` (the authors' code)."""
    lam = lam.clamp(min=0)
    total = lam.sum()
    return lam * (cap / total) if total > cap else lam


def class_weights(lam: Tensor) -> Tensor:
    """w_k = 1/K + lambda_k - (1/K) sum(lambda): weights that sum to 1, uniform at lambda = 0."""
    k = lam.numel()
    return 1.0 / k + lam - lam.sum() / k


def _measured(acc: list[float | None]) -> tuple[Tensor, Tensor]:
    """Accuracies as a tensor and the mask of classes that had validation samples (None: none)."""
    mask = torch.tensor([a is not None for a in acc])
    return torch.tensor([a if a is not None else 0.0 for a in acc], dtype=torch.float64), mask


def violations(val: ValResult, tau1: float, tau2: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-class clean / boundary errors and their constraint violations gamma_nat / gamma_bndy.

    A class without validation samples has no measurement: its errors read as the average of
    the others and its violations as 0, so its multipliers do not move.
    """
    clean, seen = _measured(val.clean_acc_per_class)
    robust, seen_r = _measured(val.robust_acc_per_class)
    seen = seen & seen_r
    clean_err, bndy_err = 1 - clean, clean - robust
    if not seen.all():
        mean_c, mean_b = clean_err[seen].mean(), bndy_err[seen].mean()
        clean_err, bndy_err = torch.where(seen, clean_err, mean_c), torch.where(seen, bndy_err, mean_b)
    gamma_nat = torch.where(seen, clean_err - clean_err.mean() - tau1, 0.0)
    gamma_bndy = torch.where(seen, bndy_err - bndy_err.mean() - tau2, 0.0)
    return clean_err, bndy_err, gamma_nat, gamma_bndy


class FRL(FineTunePhase, TRADES):
    name = "frl"
    needs_initial_val = True

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        assert isinstance(params, FRLParams)
        self.p: FRLParams = params.resolved()
        k = ctx.num_classes
        self.lambda_nat = torch.zeros(k, dtype=torch.float64)
        self.lambda_bndy = torch.zeros(k, dtype=torch.float64)
        self.lambda_margin = torch.zeros(k, dtype=torch.float64)
        self.clean_err = torch.zeros(k, dtype=torch.float64)
        self.bndy_err = torch.zeros(k, dtype=torch.float64)
        self.epoch = 0
        # the authors' train_model: clean, adversarial and clean again in train mode (the KL's target)
        self.kl_target_forward = self.p.form == "code"
        self.start_fine_tune_phase(params, ctx)

    # -- schedule (pre-training, selection, the fresh optimiser, init_from: FineTunePhase) ----------
    def decay(self, epoch: int) -> float:
        """lr and alphas x decay_factor every decay_every fine-tuning epochs (paper Sec. 5.1)."""
        return self.p.decay_factor ** ((epoch - self.p.pretrain_epochs - 1) // self.p.decay_every)

    def alpha_scales(self, epoch: int) -> tuple[float, float]:
        """The factors on (alpha1 and alpha2, alpha_margin) in fine-tuning epoch ``epoch``."""
        scale = frl_alpha_scale(epoch, self.p)  # the code's `if now_epoch % 40 == 0: rate1 = rate1 / 2`, or the paper's
        return scale, 1.0 if self.p.alpha_schedule == "code" else scale

    def lr_for(self, epoch: int, scheduled_lr: float) -> float:
        return scheduled_lr if self.pretraining(epoch) else self.p.finetune_lr * self.decay(epoch)

    def fresh_optimizer(self, epoch: int) -> bool:
        """The phase's new optimiser, unless `finetune_optimizer` keeps the pre-training's."""
        return super().fresh_optimizer(epoch) and self.p.finetune_optimizer == "fresh"

    # -- the multiplier updates ---------------------------------------------------------------------
    def start_epoch(self, epoch: int, val: ValResult | None) -> None:
        self.epoch = epoch
        if self.pretraining(epoch) or val is None:
            return
        p = self.p
        scale, margin_scale = self.alpha_scales(epoch)
        self.clean_err, self.bndy_err, gamma_nat, gamma_bndy = violations(val, p.tau1, p.tau2)
        if p.variant == "baseline_reweight":
            self._baseline_reweight(val, scale)
            return
        if p.variant in ("reweight", "reweight_remargin"):
            self.lambda_nat = project_multipliers(self.lambda_nat + p.alpha1 * scale * gamma_nat, p.lambda_cap)
            self.lambda_bndy = project_multipliers(self.lambda_bndy + p.alpha2 * scale * gamma_bndy, p.lambda_cap)
            self.weight_nat.copy_(class_weights(self.lambda_nat))
            self.weight_bndy.copy_(class_weights(self.lambda_bndy))
        if p.variant in ("remargin", "reweight_remargin"):
            self.lambda_margin = self.lambda_margin + p.alpha_margin * margin_scale * gamma_bndy
            self.eps_per_class.copy_(self.margins())

    def margins(self) -> Tensor:
        eps = self.ctx.attack.eps
        if self.p.margin_form == "code":
            return eps * torch.exp(2 * self.lambda_margin).clamp(0.98, 3.0)
        return eps * torch.exp(self.lambda_margin).clamp(self.p.margin_floor, self.p.margin_cap)

    def _baseline_reweight(self, val: ValResult, scale: float) -> None:
        """FRL Table 2's "Baseline Reweight": raise the weight of the class with the highest robust error."""
        robust, seen = _measured(val.robust_acc_per_class)
        robust_err = 1 - robust
        worst = int(torch.where(seen, robust_err, float("-inf")).argmax())
        step = torch.zeros_like(robust_err)
        step[worst] = robust_err[worst] - robust_err[seen].mean()
        self.lambda_nat = project_multipliers(self.lambda_nat + self.p.alpha1 * scale * step, self.p.lambda_cap)
        w = class_weights(self.lambda_nat)
        self.weight_nat.copy_(w)
        self.weight_bndy.copy_(w)

    def step_for(self, eps: Tensor) -> Tensor | float:
        if self.p.margin_form == "code":
            return eps.max() / 4  # the authors' code: a quarter of the batch's largest margin (no host sync)
        return self.ctx.attack.step

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        if self.pretraining(self.epoch):
            return self.pretrain.loss(model, x, y, draws)
        return super().loss(model, x, y, draws)

    # -- reporting and state ----------------------------------------------------------------------
    def method_state(self) -> dict[str, Any]:
        if self.pretraining(self.epoch):
            return self.pretrain_state()
        state = {"phase": "frl", "clean_err_per_class": self.clean_err.tolist(),
                 "bndy_err_per_class": self.bndy_err.tolist(), "lambda_nat": self.lambda_nat.tolist(),
                 "lambda_bndy": self.lambda_bndy.tolist(), "weight_nat": self.weight_nat.tolist(),
                 "weight_bndy": self.weight_bndy.tolist(), "eps_per_class": self.eps_per_class.tolist()}
        if self.p.variant in ("remargin", "reweight_remargin"):
            state["lambda_margin"] = self.lambda_margin.tolist()
        if self.p.variant == "baseline_reweight":
            state["class_weights"] = self.weight_nat.tolist()
        return state

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "lambda_nat": self.lambda_nat, "lambda_bndy": self.lambda_bndy,
                "lambda_margin": self.lambda_margin, "clean_err": self.clean_err, "bndy_err": self.bndy_err,
                "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        for key in ("lambda_nat", "lambda_bndy", "lambda_margin", "clean_err", "bndy_err"):
            setattr(self, key, state[key].cpu())
        self.epoch = state["epoch"]
