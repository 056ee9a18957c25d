"""DAFA: Distance-Aware Fair Adversarial training (Lee et al., ICLR 2024), on TRADES or PGD-AT.

Warm-up (epochs 1..tau, ``warmup_epochs``): the base method with W = 1. During epoch tau the
class-mean adversarial softmax matrix P is gathered from the loss's own train-mode forward
(P[i][j] = mean over class-i training samples of sigma_j(f(x'))). After epoch tau, once:

    W_i = 1 + lambda * sum_{j != i} T_ij,
    T_ij = +p_i(j) p_j(j)   if p_i(i) < p_j(j)   (i is the harder class: it gains)
         = -p_j(i) p_i(i)   if p_i(i) > p_j(j)   (i is the easier class: it gives)
         = 0                if p_i(i) = p_j(j)   (paper; the authors' code subtracts: ``tie_rule``)

(README Algorithm 2; utils.py ``DAFA_comp``). Epochs tau+1..E train with margin W_y eps, step
W_y alpha, and W_y on the natural CE only, reduced as a sum over the batch divided by B (on TRADES, the two
train-mode forwards in the authors' order, f(x') then f(x)):

    TRADES: L = (1/B) sum_i W_{y_i} CE(f(x_i), y_i) + beta (1/B) sum_i KL(f(x_i) || f(x'_i))
    PGD-AT: L = (1/B) sum_i W_{y_i} CE(f(x'_i), y_i)

``form = "code"`` is the authors' code where it differs (docs/reference/methods-dafa-faal.md): ties subtract, and on
PGD-AT the attack starts at x + 0.001 N(0, I) and makes a second, unweighted move per iteration
projected onto the global eps-ball. ``weight_formula = "legacy_code"`` is the code's subtract branch
before commit 74657cd (-p_i(j) p_j(j)). There is no clamp: a weight at or below zero fails the run
naming the class, unless ``weight_floor`` is set.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.pgd import as_per_sample, ascent_step, project
from engine.attacks.trades import trades_kl
from engine.contract.method_params import DAFAParams, MethodParams, PGDATParams, TRADESParams
from engine.methods.base import Method, MethodContext, StepOutput, ValResult, ce_per_sample, clean_predictions
from engine.methods.standard import PGDAT, TRADES
from engine.contract.profile_schema import ProfileError
from engine.runtime.modes import attack_mode

Tensor = torch.Tensor
log = logging.getLogger("engine")


def dafa_weights(P: Tensor, lam: float, tie_rule: str = "skip", formula: str = "paper",
                 seen: Tensor | None = None) -> Tensor:
    """W = DAFA_comp(P, lambda) for a K x K class-mean softmax matrix P (rows: true class). [K] float64

    ``tie_rule``: "skip" (Algorithm 2: an equal pair moves nothing) or "subtract" (the code's else
    branch takes ties). ``formula``: "paper" (= the code since 74657cd) or "legacy_code" (the earlier
    subtract term -p_i(j) p_j(j)). ``seen``: the classes P has a row for; a class without one (no
    training sample in the warm-up's last epoch) takes part in no pair and keeps W = 1."""
    P = P.double()
    diag = P.diagonal()
    own_i, own_j = diag[:, None], diag[None, :]  # p_i(i), p_j(j)
    gain = P * own_j  # T_ij = p_i(j) p_j(j) when i is the harder class
    give = (P.T * own_i) if formula == "paper" else gain  # p_j(i) p_i(i); legacy: p_i(j) p_j(j)
    harder = own_i < own_j
    easier = (own_i > own_j) if tie_rule == "skip" else ~harder
    T = torch.where(harder, gain, torch.where(easier, -give, torch.zeros_like(P)))
    T.fill_diagonal_(0)
    if seen is not None:
        T = T * (seen[:, None] & seen[None, :])
    return 1 + lam * T.sum(1)


def dafa_loss(ce: Tensor, w_y: Tensor, kl: Tensor | None = None, beta: float = 0.0) -> Tensor:
    """(1/B) sum_i W_{y_i} CE_i (+ beta (1/B) sum_i KL_i for TRADES): W on the natural CE only, the sum
    divided by B, not by sum W (losses.py l.69-76)."""
    loss = (w_y * ce).mean()
    return loss if kl is None else loss + beta * kl.mean()


def dafa_code_pgd(model: torch.nn.Module, x: Tensor, y: Tensor, eps_y: Tensor, step_y: Tensor, eps: float,
                  alpha: float, steps: int, draws: Draws = WHOLE, mode: str = "eval") -> Tensor:
    """The authors' PGD-AT attack (losses.py ``madry_loss``): start at x + 0.001 N(0, I); each iteration
    takes one gradient sign g and moves twice, x' <- P_{W_y eps}(x' + W_y alpha g), then
    x' <- P_eps(x' + alpha g), then clips to [0, 1]. The effective radius is min(eps, W_y eps + alpha)."""
    import torch.nn.functional as F

    eps_b, step_b = as_per_sample(eps_y, x), as_per_sample(step_y, x)
    eps_g, alpha_g = as_per_sample(eps, x), as_per_sample(alpha, x)
    x = x.detach()
    with attack_mode(model, mode):
        delta = 0.001 * draws.randn_like(x)
        for _ in range(steps):
            delta.requires_grad_(True)
            loss = F.cross_entropy(model(x + delta), y, reduction="sum")
            (grad,) = torch.autograd.grad(loss, delta)
            sign = grad.sign()
            delta = project(ascent_step(delta.detach(), sign, step_b, "linf"), eps_b, "linf")
            delta = project(delta + alpha_g * sign, eps_g, "linf")
            delta = (x + delta).clamp(0, 1) - x
    return (x + delta).detach()


class DAFA(Method):
    name = "dafa"

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        assert isinstance(params, DAFAParams)
        self.p: DAFAParams = params.resolved()
        if ctx.attack.norm != "linf":
            raise ProfileError("profile", "attack.norm", "DAFA is defined for L-inf (its margins scale an "
                               "L-inf ball); got " + ctx.attack.norm)
        k, dev = ctx.num_classes, ctx.device
        if self.p.base == "trades":
            self.base: Method = TRADES(TRADESParams(beta=self.p.beta), ctx)
        else:
            self.base = PGDAT(PGDATParams(), ctx)
        # One set of class-wise vectors: DAFA writes them, the base's attack reads the margins.
        self.eps_per_class, self.weight_nat = self.base.eps_per_class, self.base.weight_nat
        self.beta_per_class = self.base.beta_per_class
        self.W = torch.ones(k, dtype=torch.float64)
        self.P: Tensor | None = None  # K x K, after the warm-up
        self.prob_sums = torch.zeros(k, k, dtype=torch.float64, device=dev)  # epoch tau's sums of sigma(f(x'))
        self.prob_counts = torch.zeros(k, dtype=torch.float64, device=dev)
        self.epoch = 0
        self.measured: dict[str, Any] = {}

    # -- per batch ------------------------------------------------------------------------------
    def step_for(self, eps: Tensor) -> Tensor | float:
        """alpha W_y: the step scales with the sample's margin (eps_y = W_y eps)."""
        a = self.ctx.attack
        return a.step * eps / a.eps

    def collecting(self) -> bool:
        return self.epoch == self.p.warmup_epochs

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        w = self.weight_nat[y]
        eps = self.eps_per_class[y]
        step = self.step_for(eps)
        a = self.ctx.attack
        if self.p.base == "trades":
            x_adv = self.trades_adversary(x, y, eps, step, draws)
            # The authors' order (losses.py l.65-66): x' first, then x. Loss and gradient do not depend on it,
            # but BatchNorm's running statistics do, and the next batch's eval-mode attack reads them.
            logits_adv = model(x_adv)
            logits_clean = model(x)
            loss = dafa_loss(ce_per_sample(logits_clean, y), w, trades_kl(logits_adv, logits_clean, self.ctx.kl),
                             self.p.beta)
            clean = logits_clean.detach()
        else:
            attack = self.base.attack
            if self.p.pgd_second_step:
                x_adv = dafa_code_pgd(attack.model, x, y, eps, step, a.eps, a.step, a.steps, draws,
                                      attack.model_mode)
            else:
                x_adv = attack.perturb(x, y, eps=eps, step=step, draws=draws)
            clean = clean_predictions(attack.model, x)
            logits_adv = model(x_adv)
            loss = dafa_loss(ce_per_sample(logits_adv, y), w)
        if self.collecting():  # the loss's own train-mode adversarial forward, before the step
            with torch.no_grad():
                self.prob_sums.index_add_(0, y, torch.softmax(logits_adv.detach().double(), 1))
                self.prob_counts.index_add_(0, y, torch.ones_like(y, dtype=torch.float64))
        return StepOutput(loss, logits_adv.detach(), clean)

    def trades_adversary(self, x: Tensor, y: Tensor, eps: Tensor, step: Tensor | float, draws: Draws) -> Tensor:
        """The TRADES base's adversarial examples at the class-wise margins and steps (TRIX mixes its own)."""
        return self.base.attack.perturb(x, eps=eps, step=step, draws=draws)

    # -- between epochs -------------------------------------------------------------------------
    def start_epoch(self, epoch: int, val: ValResult | None) -> None:
        self.epoch = epoch
        self.measured = {}
        if self.collecting():
            self.prob_sums.zero_()
            self.prob_counts.zero_()

    def end_epoch(self, epoch: int, model: torch.nn.Module, train_robust_acc: list[float | None],
                  val: ValResult) -> None:
        if epoch != self.p.warmup_epochs:
            return
        sums, counts = self.prob_sums.clone(), self.prob_counts.clone()
        if self.ctx.group is not None:
            self.ctx.group.sum_(sums, counts)  # every rank's samples: the same P on every rank
        sums, counts = sums.cpu(), counts.cpu()
        names = self.ctx.class_names
        seen = counts > 0
        for k in (~seen).nonzero().flatten().tolist():
            log.warning("DAFA: class %s had no training sample in epoch %d: it has no row of P, takes part "
                        "in no pair and keeps the weight 1", _label(names, k), epoch)
        self.P = torch.where(seen[:, None], sums / counts.clamp_min(1)[:, None], torch.zeros_like(sums))
        W = dafa_weights(self.P, self.p.dafa_lambda, self.p.tie_rule, self.p.weight_formula, seen)
        if self.p.weight_floor is None and bool((W <= 0).any()):
            k = int((W <= 0).nonzero()[0])
            raise ProfileError("profile", "method.weight_floor", f"DAFA gives class {_label(names, k)} the "
                               f"weight {float(W[k]):.4g} <= 0 after the warm-up (lambda {self.p.dafa_lambda}): "
                               "its margin would vanish. Lower method.dafa_lambda, or set method.weight_floor "
                               "(e.g. 0.1) to clamp the weights")
        if self.p.weight_floor is not None:
            W = W.clamp(min=self.p.weight_floor)
        self.W = W
        self._apply()
        self.measured = {"adv_prob_matrix": self.P.tolist(), "dafa_weight": self.W.tolist()}

    def _apply(self) -> None:
        self.eps_per_class.copy_((self.W * self.ctx.attack.eps).to(self.eps_per_class))
        self.weight_nat.copy_(self.W.to(self.weight_nat))

    def method_state(self) -> dict[str, Any]:
        a = self.ctx.attack
        phase = "warm-up" if self.epoch <= self.p.warmup_epochs else "dafa"
        return {"phase": f"{phase} ({self.p.base})", "dafa_weight": self.W.tolist(),
                "eps_per_class": self.eps_per_class.tolist(),
                "step_per_class": [a.step * float(w) for w in self.W], "weight_nat": self.weight_nat.tolist()}

    def measurements(self) -> dict[str, Any]:
        return self.measured

    # -- checkpoint -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        # The partial sums of P are the epoch's (batch_state): a resume at an epoch's start needs none.
        return {**super().state_dict(), "W": self.W, "P": self.P, "epoch": self.epoch}

    def batch_state(self) -> dict[str, Tensor]:
        return {"prob_sums": self.prob_sums, "prob_counts": self.prob_counts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.W = state["W"].cpu()
        self.P = state["P"].cpu() if state["P"] is not None else None
        self.epoch = state["epoch"]


def _label(names: list[str] | None, k: int) -> str:
    return f"{k} ({names[k]})" if names and k < len(names) else str(k)
