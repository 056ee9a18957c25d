"""FAAL: Fairness-Aware Adversarial Learning (Zhang et al., CVPR 2024), as the authors' code runs it.

A fine-tune of an already robust model (``init_from``, or ``pretrain_epochs`` in the same run): a new
SGD at ``finetune_lr``, times ``finetune_gamma`` at ft_prn.py's milestones for the fine-tune's length
(:func:`ft_prn_milestones`; 2 epochs: 0.01, then 0.001). Per batch (ft_prn.py l.190-276):

1. x' from the base's attack (PGD-CE for AT, the TRADES KL attack for TRADES), in eval mode;
2. train-mode forwards z' = f(x') and z = f(x) (the clean one runs for AT too: BatchNorm statistics);
3. m_i = max_{j != y_i} sigma_j(z'_i) - sigma_{y_i}(z'_i), the CW margin on probabilities, and the
   class scores c_k = sum of m_i over the class-k samples (``class_scores = "class_mean"``: their mean);
4. p* = argmax_p c.p subject to KL(u || p) <= r on the simplex, in closed form
   (:func:`worst_class_distribution`), held constant;
5. L = (1/B) sum_i K p*_{y_i} L_i, L_i the AT loss CE(z'_i, y_i) or the TRADES loss
   CE(z_i, y_i) + beta KL(sigma(z_i) || sigma(z'_i)).

Under DDP, c is summed over the global batch (one all-reduce of K numbers per batch), so every rank
weighs with the same p*. The authors select checkpoints on 2,560 test images; fairtui selects on the
validation split.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.trades import trades_kl
from engine.contract.method_params import FAALParams, MethodParams, PGDATParams, TRADESParams
from engine.methods.base import Method, MethodContext, StepOutput, ValResult, ce_per_sample
from engine.methods.standard import PGDAT, TRADES, FineTunePhase

Tensor = torch.Tensor


def _log_expm1(x: float) -> float:
    """ln(e^x - 1) without overflow for large x."""
    return x + math.log1p(-math.exp(-x)) if x > 30 else math.log(math.expm1(x))


def worst_class_distribution(c: Tensor, r: float, steps: int = 64) -> Tensor:
    """p* = argmax_p sum_k c_k p_k over the simplex with KL(u || p) <= r, u uniform. [K] float64

    Closed form (docs/reference/methods-dafa-faal.md): with g_k = max c - c_k, p*_k is proportional to 1 / (t* + g_k),
    t* the root of H(t) = ln(mean 1/(t + g)) + mean ln(t + g) = r, found by ``steps`` bisection halvings
    in ln t on [s / (e^{K(r + ln K)} - 1), s / (e^r - 1)], s = max g. H decreases in t. On the tensor's
    device, no host synchronisation; uniform when r <= 0 or c is constant."""
    c = c.detach().double()
    k = c.numel()
    uniform = torch.full_like(c, 1.0 / k)
    if r <= 0:
        return uniform
    g = c.max() - c
    s = g.max()
    log_s = torch.log(s.clamp_min(1e-300))
    lo = log_s - _log_expm1(k * (r + math.log(k)))
    hi = log_s - _log_expm1(r)
    for _ in range(steps):
        mid = (lo + hi) / 2
        d = mid.exp() + g
        h = torch.log((1 / d).mean()) + torch.log(d).mean()
        above = h > r  # t too small
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    a = 1 / (((lo + hi) / 2).exp() + g)
    return torch.where(s > 0, a / a.sum(), uniform)


def probability_margin(logits: Tensor, y: Tensor) -> Tensor:
    """m_i = max_{j != y_i} sigma_j(z_i) - sigma_{y_i}(z_i), in [-1, 1]. [B]"""
    q = torch.softmax(logits.float(), 1)
    true = q.gather(1, y[:, None]).squeeze(1)
    other = q.masked_fill(F.one_hot(y, q.shape[1]).bool(), float("-inf")).amax(1)
    return other - true


def faal_loss(logits_adv: Tensor, logits_clean: Tensor, y: Tensor, k: int, p: FAALParams, group: Any = None,
              kl: str = "log_space"
              ) -> tuple[Tensor, Tensor, Tensor]:
    """L = (1/B) sum_i K p*_{y_i} L_i with p* the worst class distribution for the batch's class scores;
    also p* and c. ``group``: c is summed over the ranks' shards first (the global batch's scores)."""
    margins = probability_margin(logits_adv.detach(), y).double()
    sums = torch.zeros(k, dtype=torch.float64, device=margins.device).index_add_(0, y, margins)
    counts = torch.bincount(y, minlength=k).double()
    if group is not None:
        group.sum_(sums, counts)
    if p.class_scores == "code":
        c = sums
    else:  # the class means; an absent class scores -1 (the code's NaN -> -1)
        c = torch.where(counts > 0, sums / counts.clamp_min(1), torch.full_like(sums, -1.0))
    p_star = worst_class_distribution(c, p.radius, p.bisection_steps)
    if p.base == "at":
        per_sample = ce_per_sample(logits_adv, y)
    else:
        per_sample = ce_per_sample(logits_clean, y) + p.beta * trades_kl(logits_adv, logits_clean, kl)
    weights = (k * p_star).to(per_sample.dtype)[y]
    return (weights * per_sample).mean(), p_star, c


def ft_prn_milestones(epochs: int) -> list[float]:
    """The milestones ft_prn.py gives MultiStepLR (``lr_schedule = "multistep"``) for ``epochs`` epochs, as it
    writes them: a table by epoch count, else thirds. MultiStepLR compares its integer step count with each
    milestone, so one that is not a whole number (thirds of 5 epochs: 1.67, 3.33) never fires: the caller
    counts only whole ones, as PyTorch does."""
    if epochs == 200:
        return [epochs / 2, epochs * 3 / 4]
    if epochs == 110:
        return [epochs * 100 / 110, epochs * 105 / 110]
    if epochs == 50:
        return [epochs * 25 / 50, epochs * 40 / 50]
    if epochs in (2, 4, 100):
        return [epochs * 1 / 2]
    if epochs in (6, 10, 20):
        return [1]
    return [epochs * 1 / 3, epochs * 2 / 3]


class FAAL(FineTunePhase, Method):
    name = "faal"

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        assert isinstance(params, FAALParams)
        self.p: FAALParams = params
        self.base: Method = PGDAT(PGDATParams(), ctx) if params.base == "at" else \
            TRADES(TRADESParams(beta=params.beta), ctx)
        self.start_fine_tune_phase(params, ctx)
        k, dev = ctx.num_classes, ctx.device
        self.epoch = 0
        # The epoch's p* summary, on the device (no host sync per batch): sums, min and max of K p*, sum of c.
        self.kp_sum = torch.zeros(k, dtype=torch.float64, device=dev)
        self.kp_min = torch.full((k,), math.inf, dtype=torch.float64, device=dev)
        self.kp_max = torch.full((k,), -math.inf, dtype=torch.float64, device=dev)
        self.c_sum = torch.zeros(k, dtype=torch.float64, device=dev)
        self.batches = torch.zeros((), dtype=torch.float64, device=dev)

    # -- schedule (pre-training, selection, the fresh optimiser, init_from: FineTunePhase) --------------
    def lr_for(self, epoch: int, scheduled_lr: float) -> float:
        """ft_prn.py's MultiStepLR for the fine-tune's length, stepped once per epoch: finetune_lr times
        finetune_gamma for every milestone passed."""
        if self.pretraining(epoch):
            return scheduled_lr
        done = epoch - self.p.pretrain_epochs - 1  # fine-tune epochs before this one: the scheduler's steps
        total = self.ctx.profile.train.epochs - self.p.pretrain_epochs
        passed = sum(1 for m in ft_prn_milestones(total) if m == int(m) and m <= done)
        return self.p.finetune_lr * self.p.finetune_gamma ** passed

    def selection_score(self, val: ValResult) -> float:
        from engine.runtime import metrics

        if self.p.select == "worst":
            return metrics.worst(val.robust_acc_per_class)
        return super().selection_score(val)

    # -- per batch ------------------------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        if self.pretraining(self.epoch):
            return self.pretrain.loss(model, x, y, draws)
        k = self.ctx.num_classes
        attack = self.base.attack
        x_adv = attack.perturb(x, y, draws=draws) if self.p.base == "at" else attack.perturb(x, draws=draws)
        logits_adv = model(x_adv)
        logits_clean = model(x)  # in AT too, as the code runs it (BatchNorm's running statistics)
        loss, p, c = faal_loss(logits_adv, logits_clean, y, k, self.p, self.ctx.group, self.ctx.kl)
        with torch.no_grad():
            kp = k * p
            self.kp_sum += kp
            torch.minimum(self.kp_min, kp, out=self.kp_min)
            torch.maximum(self.kp_max, kp, out=self.kp_max)
            self.c_sum += c
            self.batches += 1
        return StepOutput(loss, logits_adv.detach(), logits_clean.detach())

    # -- between epochs -------------------------------------------------------------------------------
    def start_epoch(self, epoch: int, val: ValResult | None) -> None:
        self.epoch = epoch
        for t, v in ((self.kp_sum, 0.0), (self.kp_min, math.inf), (self.kp_max, -math.inf), (self.c_sum, 0.0),
                     (self.batches, 0.0)):
            t.fill_(v)

    def method_state(self) -> dict[str, Any]:
        if self.pretraining(self.epoch):
            return self.pretrain_state()
        return {"phase": f"faal ({self.p.base})", "radius": self.p.radius}

    def measurements(self) -> dict[str, Any]:
        """The epoch's K p*: its batch mean, min and max per class, and the batch mean of c."""
        if self.pretraining(self.epoch) or float(self.batches) == 0:
            return {}
        n = float(self.batches)
        return {"faal_weight_mean": (self.kp_sum / n).tolist(), "faal_weight_min": self.kp_min.tolist(),
                "faal_weight_max": self.kp_max.tolist(), "class_score_mean": (self.c_sum / n).tolist()}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "epoch": self.epoch}

    def batch_state(self) -> dict[str, Tensor]:
        return {"kp_sum": self.kp_sum, "kp_min": self.kp_min, "kp_max": self.kp_max, "c_sum": self.c_sum,
                "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.epoch = state["epoch"]
