"""CFA: Class-wise Calibrated Fair Adversarial training (Wei, Wang, Guo, Wang, CVPR 2023).

t_k is class k's robust accuracy on the training batches' own adversarial
predictions in the previous epoch (the authors' code: no extra pass).
- CCM (Eq. 6): eps_k = (lambda1 + t_k) * eps.
- CCR (TRADES only): beta_k = (lambda2 + t_k) * beta, loss (CE + beta_y KL) / (1 + beta_y).
  (Algorithm 1 misprints this update with eps.)
- FAWA: after each epoch from `fawa_start_epoch`, if the validation worst-class robust
  accuracy is >= delta, theta_bar <- d theta_bar + (1 - d) theta (the first accepted copies).
Calibration applies from `calibration_start_epoch` (2 in Algorithm 1: epoch 1 has no t_k;
11 in the authors' code, whose 0-based `epoch >= 10` is the 11th epoch).
"""

from __future__ import annotations

from typing import Any

import torch

from engine.runtime import metrics
from engine.attacks.noise import WHOLE, Draws
from engine.runtime.averaging import WeightAverage
from engine.contract.method_params import CFAParams, MethodParams, PGDATParams, TRADESParams
from engine.methods.base import Method, MethodContext, StepOutput, ValResult
from engine.methods.standard import FAT, PGDAT, TRADES

Tensor = torch.Tensor


def calibrated(base_value: float, lam: float, t: Tensor) -> Tensor:
    """(lambda + t_k) * base: CCM's margins (Eq. 6) and CCR's betas."""
    return (lam + t) * base_value


class CFA(Method):
    name = "cfa"

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        assert isinstance(params, CFAParams)
        params = params.resolved()
        self.p: CFAParams = params
        code = params.form == "code"
        if params.base == "trades":
            trades = TRADES(TRADESParams(beta=params.beta, scale_by_one_plus_beta=True), ctx)
            # the authors' cw_trades_loss and train_epoch: clean, adversarial, clean, and after the step clean
            trades.kl_target_forward = trades.clean_after_step = code
            self.inner: Method = trades
        elif params.base == "fat":
            self.inner = FAT(PGDATParams(), ctx, tau=params.fat_tau, early_stop_rule="cfa_code" if code else "fat")
        else:
            self.inner = PGDAT(PGDATParams(), ctx)
        # One set of class-wise vectors: CFA writes them, the base method's loss reads them.
        self.eps_per_class, self.beta_per_class = self.inner.eps_per_class, self.inner.beta_per_class
        self.weight_nat, self.weight_bndy = self.inner.weight_nat, self.inner.weight_bndy
        self.t = torch.zeros(ctx.num_classes, dtype=torch.float64)  # t_k of the latest epoch
        self.fawa = WeightAverage(params.fawa_decay) if params.fawa else None
        self.fawa_accepted: bool | None = None
        self.val_worst_robust: float | None = None

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        return self.inner.loss(model, x, y, draws)

    def end_epoch(self, epoch: int, model: torch.nn.Module, train_robust_acc: list[float | None],
                  val: ValResult) -> None:
        # A class absent from this epoch's batches keeps its previous t_k.
        self.t = torch.tensor([a if a is not None else float(self.t[i]) for i, a in enumerate(train_robust_acc)],
                              dtype=torch.float64)
        if epoch + 1 >= self.p.calibration_start_epoch:  # the values epoch + 1 trains with
            if self.p.ccm:
                self.eps_per_class.copy_(calibrated(self.ctx.attack.eps, self.p.lambda1, self.t))
            if self.p.ccr:
                self.beta_per_class.copy_(calibrated(self.p.beta, self.p.lambda2, self.t))
        self.fawa_accepted, self.val_worst_robust = None, metrics.worst(val.robust_acc_per_class)
        if self.fawa is not None and epoch >= self.p.fawa_start_epoch:
            self.fawa_accepted = self.val_worst_robust >= self.p.fawa_threshold
            if self.fawa_accepted:
                self.fawa.update(model)

    def method_state(self) -> dict[str, Any]:
        state = {"eps_per_class": self.eps_per_class.tolist()}
        if self.p.base == "trades":
            state["beta_per_class"] = self.beta_per_class.tolist()
        return state

    def measurements(self) -> dict[str, Any]:
        return {"train_robust_acc_per_class": self.t.tolist(), "fawa_accepted": self.fawa_accepted,
                "val_worst_robust": self.val_worst_robust}

    def never_acted(self, epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """FAWA that accepted no epoch: the run has no "fawa" checkpoint, and the gate, not the method, is why."""
        if self.fawa is None:
            return []
        gated = [e["method_state"] for e in epochs if e.get("method_state", {}).get("fawa_accepted") is not None]
        if any(m["fawa_accepted"] for m in gated):
            return []
        best = max((m["val_worst_robust"] for m in gated if m.get("val_worst_robust") is not None), default=None)
        seen = f"its best {best:.3f}" if best is not None else "no epoch was gated"
        last = self.ctx.profile.train.epochs
        return [{"mechanism": "fawa", "checkpoint": "fawa",
                 "reason": f"FAWA accepted no epoch: the validation worst-class robust accuracy stayed below the gate "
                           f"{self.p.fawa_threshold:g} in epochs {self.p.fawa_start_epoch}-{last} ({seen}); the "
                           f"results are CFA without FAWA (method.fawa_threshold sets the gate)"}]

    def averaged_models(self) -> dict[str, dict[str, Tensor]]:
        return {"fawa": self.fawa.state} if self.fawa is not None and self.fawa.state is not None else {}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "t": self.t,
                "fawa": self.fawa.state if self.fawa is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.t = state["t"].cpu()
        if self.fawa is not None:
            self.fawa.state = state["fawa"]
