"""WAT: Worst-class Adversarial Training (Li & Liu, AAAI 2023), Algorithm 1, Eq. 8-12.

A Hedge player keeps K + 1 weights over TRADES losses: index 0 the overall loss,
index k + 1 the loss of class k. Each batch minimises sum_j w_j L_j. After each
epoch the validation TRADES loss of every class and overall (the K + 1 costs)
is added to running sums S, and w = softmax(eta * S) (Eq. 12), computed stably
(softmax subtracts the maximum) in float64 because S grows every epoch. S is in
the checkpoint, so a resumed run continues the game.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from engine.attacks.trades import trades_kl
from engine.attacks.noise import WHOLE, Draws
from engine.contract.method_params import MethodParams, WATParams
from engine.methods.base import MethodContext, StepOutput, ValResult, ce_per_sample
from engine.methods.standard import TRADES
from engine.runtime.modes import eval_mode

Tensor = torch.Tensor


def hedge_weights(cost_sums: Tensor, eta: float) -> Tensor:
    """Eq. 12: w = softmax(eta * S), overflow-free for any size of S."""
    return torch.softmax(eta * cost_sums.to(torch.float64), dim=0)


def code_weights(hedge: Tensor, epoch: int) -> Tensor:
    """The authors' weights for ``loss_form = "code"``: ``torch.ones(K + 1)`` in the first epoch (they sum
    to K + 1), then K * softmax(eta * S) (they sum to K). Same order as ``hedge``, overall first."""
    k = hedge.numel() - 1
    return torch.ones_like(hedge) if epoch == 1 else k * hedge


def per_class_mean(values: Tensor, y: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Per-class sums and counts of per-sample values. Two [K] tensors."""
    sums = torch.zeros(k, dtype=values.dtype, device=values.device).index_add_(0, y, values)
    return sums, torch.bincount(y, minlength=k).to(values.dtype)


class WAT(TRADES):
    name = "wat"

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        assert isinstance(params, WATParams)
        self.p: WATParams = params
        k = ctx.num_classes
        self.cost_sums = torch.zeros(k + 1, dtype=torch.float64)  # S: overall first
        self.hedge = hedge_weights(self.cost_sums, params.eta)  # uniform at the start
        self.val_cost: Tensor | None = None
        self.start_epoch(1, None)

    def trades_terms(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE
                     ) -> tuple[Tensor, Tensor, Tensor]:
        x_adv = self.attack.perturb(x, draws=draws)
        logits_clean, logits_adv = model(x), model(x_adv)
        per_sample = ce_per_sample(logits_clean, y) + self.p.beta * trades_kl(logits_adv, logits_clean, self.ctx.kl)
        return per_sample, logits_clean, logits_adv

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        per_sample, logits_clean, logits_adv = self.trades_terms(model, x, y, draws)
        w = self.batch_weights.to(per_sample.dtype)
        if self.p.loss_form == "code":
            # (1/B) sum_n (w_{y_n} + w_overall) * loss_n with the authors' weights (code_weights)
            loss = ((w[1:][y] + w[0]) * per_sample).mean()
        else:
            sums, counts = per_class_mean(per_sample, y, self.ctx.num_classes)
            class_losses = sums / counts.clamp(min=1)  # L_k; a class absent from the batch contributes 0
            loss = w[0] * per_sample.mean() + (w[1:] * class_losses).sum()
        return StepOutput(loss, logits_adv.detach(), logits_clean.detach())

    def start_epoch(self, epoch: int, val: ValResult | None) -> None:
        self.trained_with = self.hedge.clone()
        weights = code_weights(self.hedge, epoch) if self.p.loss_form == "code" else self.hedge
        self.batch_weights = weights.to(self.ctx.device, torch.float32)  # read by every batch: on the device

    @torch.no_grad()
    def validation_costs(self) -> Tensor:
        """The K + 1 validation TRADES losses (overall first) on TRADES-attacked validation data, through
        the attack model (the trainer's validation runs the same module)."""
        k = self.ctx.num_classes
        sums = torch.zeros(k, dtype=torch.float64)
        counts = torch.zeros(k, dtype=torch.float64)
        model = self.attack.model
        with eval_mode(model):
            for x, y, draws in self.ctx.val_batches():
                with torch.enable_grad():
                    x_adv = self.attack.perturb(x, draws=draws)
                logits_clean, logits_adv = model(x), model(x_adv)
                per_sample = F.cross_entropy(logits_clean, y, reduction="none") + \
                    self.p.beta * trades_kl(logits_adv, logits_clean, self.ctx.kl)
                s, c = per_class_mean(per_sample.double(), y, k)
                sums += s.cpu()
                counts += c.cpu()
        if self.ctx.group is not None:
            self.ctx.group.sum_(sums, counts)  # every rank's shard: the same K + 1 costs on every rank
        overall = sums.sum() / counts.sum().clamp(min=1)
        return torch.cat([overall.view(1), sums / counts.clamp(min=1)])

    def end_epoch(self, epoch: int, model: torch.nn.Module, train_robust_acc: list[float | None],
                  val: ValResult) -> None:
        self.val_cost = self.validation_costs()
        self.cost_sums = self.cost_sums + self.val_cost
        self.hedge = hedge_weights(self.cost_sums, self.p.eta)

    def method_state(self) -> dict[str, Any]:
        state = {"weights": self.trained_with.tolist()}
        if self.p.loss_form == "code":  # what the batches multiplied: sum K + 1 in epoch 1, K after
            state["loss_weights"] = self.batch_weights.double().tolist()
        return state

    def measurements(self) -> dict[str, Any]:
        return {"val_cost": self.val_cost.tolist() if self.val_cost is not None else None,
                "val_cost_sum": self.cost_sums.tolist(), "next_weights": self.hedge.tolist()}

    def selection_score(self, val: ValResult) -> float:
        """Algorithm 1's output: the checkpoint with the lowest worst-class validation loss."""
        return -float(self.val_cost[1:].max()) if self.val_cost is not None else float("-inf")

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "cost_sums": self.cost_sums, "hedge": self.hedge,
                "val_cost": self.val_cost, "trained_with": self.trained_with}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.cost_sums, self.hedge = state["cost_sums"].cpu(), state["hedge"].cpu()
        self.val_cost = state["val_cost"].cpu() if state["val_cost"] is not None else None
        self.trained_with = state["trained_with"].cpu()
