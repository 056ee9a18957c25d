"""CSR: Confusional Spectral Regularization (Jin et al., ICLR 2025), as its authors' code trains it.

docs/reference/methods-bat-csr.md gives the rule with the lines of the authors' code; in short:

- a fine-tune (engine.methods.standard.FineTunePhase): from ``init_from``'s weights, or after pre-training in
  the run, at ``finetune_lr``;
- before every fine-tuning epoch (:meth:`CSR.prepare_epoch`), over the epoch's training batches in eval mode:
  PGD (cross-entropy, uniform start, ``confusion_steps`` steps of the profile's step), the true class's logit
  times ``true_logit_scale``, and C[pred][y] += 1 for every sample then misclassified (rows: the predicted
  class, columns: the true one; summed over the ranks);
- G = u1 v1^T from C's top singular pair, rescaled to [g_low, g_low + g_span] (:func:`spectral_weights`);
- per batch, TRADES's attack in eval mode, then four train-mode forwards in the code's order (x, x', x, x')
  and L = natural_weight CE(f(x), y) + beta KL(f(x) || f(x')) + spectral_weight (1/B) sum_i g_i (ln g_i -
  ln p_{y_i}(x'_i)), with g_i = G[argmax f(x')_i, y_i].

Where the code leaves it undefined (a C with no misclassified sample: a zero G and a division by zero),
G = 1 everywhere and the epoch's method state says so.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from engine.attacks.noise import WHOLE, Draws
from engine.attacks.pgd import PGD
from engine.attacks.trades import TRADESAttack, trades_kl
from engine.contract.method_params import MethodParams
from engine.contract.method_params_recent import CSRParams
from engine.methods.base import Method, MethodContext, StepOutput, ce_per_sample
from engine.methods.standard import FineTunePhase
from engine.runtime.modes import eval_mode

Tensor = torch.Tensor


def confusion_counts(logits_adv: Tensor, y: Tensor, k: int, true_logit_scale: float) -> Tensor:
    """The code's robust confusion counts of a batch: the true class's logit times ``true_logit_scale``, then
    C[pred][y] += 1 for each sample predicted wrong. [K, K] float64."""
    z = logits_adv.detach().double().clone()
    rows = torch.arange(len(y), device=z.device)
    z[rows, y] = z[rows, y] * true_logit_scale
    pred = z.argmax(1)
    wrong = pred != y
    counts = torch.zeros(k, k, dtype=torch.float64, device=z.device)
    counts.index_put_((pred[wrong], y[wrong]), torch.ones(int(wrong.sum()), dtype=torch.float64, device=z.device),
                      accumulate=True)
    return counts


def spectral_weights(c: Tensor, low: float, span: float) -> tuple[Tensor, float, bool]:
    """G = u1 v1^T of C's top singular pair (the gradient of ||C||_2), rescaled to [low, low + span]; its
    top singular value; and whether G was undefined (no misclassified sample, or a G without spread), in
    which case G = 1 everywhere."""
    c = c.double().cpu()
    if not bool((c != 0).any()):
        return torch.ones_like(c), 0.0, True
    u, s, vh = torch.linalg.svd(c)
    g = torch.outer(u[:, 0], vh[0])
    spread = float(g.max() - g.min())
    if spread <= 0.0:
        return torch.ones_like(c), float(s[0]), True
    return span * (g - g.min()) / spread + low, float(s[0]), False


class CSR(FineTunePhase, Method):
    name = "csr"

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        assert isinstance(params, CSRParams)
        self.p: CSRParams = params
        a = ctx.attack
        self.attack = TRADESAttack(ctx.attack_model, eps=a.eps, step=a.step, steps=a.steps, norm=a.norm,  # type: ignore
                                   model_mode=ctx.training_attack_mode, kl=ctx.kl)
        # the confusion pass's attack: PGD with cross-entropy from a uniform start, in eval mode
        self.confusion_attack = PGD(ctx.attack_model, eps=a.eps, step=a.step, steps=params.confusion_steps,  # type: ignore
                                    norm=a.norm, random_start=True, loss="ce", model_mode="eval")
        self.start_fine_tune_phase(params, ctx)
        k = ctx.num_classes
        self.epoch = 0
        self.confusion = torch.zeros(k, k, dtype=torch.float64)
        self.weights = torch.ones(k, k, dtype=torch.float64, device=ctx.device)  # G
        self.sigma1 = 0.0
        self.undefined = False

    # -- schedule (pre-training, selection, the fresh optimiser, init_from: FineTunePhase) -----------------
    def lr_for(self, epoch: int, scheduled_lr: float) -> float:
        return scheduled_lr if self.pretraining(epoch) else self.p.finetune_lr

    def start_epoch(self, epoch: int, val: Any) -> None:
        self.epoch = epoch

    def prepare_epoch(self, epoch: int, batches: Any) -> None:
        """C over the epoch's training batches, then G (before the epoch trains)."""
        if self.pretraining(epoch):
            return
        k = self.ctx.num_classes
        counts = torch.zeros(k, k, dtype=torch.float64, device=self.ctx.device)
        model = self.confusion_attack.model
        for x, y, draws in batches():
            x_adv = self.confusion_attack.perturb(x, y, draws=draws)
            with torch.no_grad(), eval_mode(model):
                counts += confusion_counts(model(x_adv), y, k, self.p.true_logit_scale)
        if self.ctx.group is not None:
            self.ctx.group.sum_(counts)  # every rank's rows: the same C on every rank
        self.confusion = counts.cpu()
        g, self.sigma1, self.undefined = spectral_weights(self.confusion, self.p.g_low, self.p.g_span)
        self.weights = g.to(self.ctx.device)

    # -- per batch ----------------------------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        if self.pretraining(self.epoch):
            return self.pretrain.loss(model, x, y, draws)
        x_adv = self.attack.perturb(x, draws=draws)
        logits_clean = model(x)  # the code's four train-mode forwards, in its order: x, x', x, x'
        natural = ce_per_sample(logits_clean, y)
        robust = self.p.beta * trades_kl(model(x_adv), model(x), self.ctx.kl)
        logits_adv = model(x_adv)
        g = self.weights[logits_adv.argmax(1).detach(), y].to(logits_adv.dtype)
        log_p = F.log_softmax(logits_adv, 1).gather(1, y.view(-1, 1)).squeeze(1)
        spectral = g * (torch.log(g) - log_p)
        loss = (self.p.natural_weight * natural + robust + self.p.spectral_weight * spectral).mean()
        return StepOutput(loss, logits_adv.detach(), logits_clean.detach(),
                          {"ce": natural.detach(), "kl": robust.detach(), "spectral": spectral.detach()})

    # -- reporting and state --------------------------------------------------------------------------------
    def method_state(self) -> dict[str, Any]:
        if self.pretraining(self.epoch):
            return self.pretrain_state()
        state: dict[str, Any] = {"phase": "csr", "confusion": self.confusion.tolist(),
                                 "spectral_weights": self.weights.cpu().tolist(), "sigma1": self.sigma1}
        if self.undefined:
            state["note"] = "G undefined (no sample misclassified in the confusion pass): G = 1 everywhere"
        return state

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.epoch = state["epoch"]
