"""The baselines: natural training, PGD-AT (Madry et al.) and TRADES (Zhang et al.).

Both adversarial losses read the class-wise vectors of :class:`Method`, so the
fairness methods reuse them by changing margins, weights and betas.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.attacks.pgd import PGD
from engine.attacks.trades import TRADESAttack, trades_kl
from engine.attacks.noise import WHOLE, Draws
from engine.methods.base import Method, MethodContext, StepOutput, ce_per_sample, clean_predictions, \
    weighted_mean
from engine.contract.method_params import MethodParams, PGDATParams, TRADESParams
from engine.contract.profile_schema import ProfileError
from engine.contract.protocol import resolve_init_checkpoint, run_checkpoint

Tensor = torch.Tensor


class Natural(Method):
    name = "natural"

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        logits = model(x)
        return StepOutput(ce_per_sample(logits, y).mean(), None, logits.detach())


class PGDAT(Method):
    """min E[ w_y * CE(f(x'), y) ], x' = PGD(x) with eps_y: PGD-AT with class-wise margins and weights."""

    name = "pgd_at"

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        a = ctx.attack
        self.attack = PGD(ctx.attack_model, eps=a.eps, step=a.step, steps=a.steps, norm=a.norm,  # type: ignore[arg-type]
                          random_start=a.random_start, loss=a.loss, temperature=a.temperature,
                          model_mode=ctx.training_attack_mode)

    def adversarial(self, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> Tensor:
        eps = self.eps_per_class[y]
        return self.attack.perturb(x, y, eps=eps, step=self.step_for(eps), draws=draws)

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        x_adv = self.adversarial(x, y, draws)
        # In train mode (the CFA authors' loop) the clean accuracy comes from a train-mode forward
        # after the optimiser step, which the loop runs; in eval mode, from an eval-mode forward here.
        after = self.attack.model_mode == "train"
        logits_clean = None if after else clean_predictions(self.attack.model, x)
        logits_adv = model(x_adv)
        loss = weighted_mean(ce_per_sample(logits_adv, y), self.weight_nat[y])
        return StepOutput(loss, logits_adv.detach(), logits_clean, clean_after_step=after)


class FAT(PGDAT):
    """PGD-AT on early-stopped PGD examples (Zhang et al. 2020, friendly adversarial training).

    ``early_stop_rule = "cfa_code"`` is the CFA authors' ``fat_loss`` instead (see PGD)."""

    name = "fat"

    def __init__(self, params: MethodParams, ctx: MethodContext, tau: int | None = None,
                 early_stop_rule: str = "fat"):
        super().__init__(params, ctx)
        self.attack.early_stop_tau = getattr(params, "tau", 0) if tau is None else tau
        self.attack.early_stop_rule = early_stop_rule


class TRADES(Method):
    """CE(f(x), y) + beta_y * KL(f(x) || f(x')), each term class-weighted.

    With `beta_per_class` this is Tian et al.'s class-wise TRADES (Eq. 5); with
    `scale_by_one_plus_beta` the loss is divided by (1 + beta_y) as in the CFA
    authors' code and CFA's CCR.
    """

    name = "trades"

    def __init__(self, params: MethodParams, ctx: MethodContext):
        super().__init__(params, ctx)
        a = ctx.attack
        self.attack = TRADESAttack(ctx.attack_model, eps=a.eps, step=a.step, steps=a.steps, norm=a.norm,  # type: ignore
                                   model_mode=ctx.training_attack_mode, kl=ctx.kl)
        betas = getattr(params, "beta_per_class", ())
        if betas and len(betas) != ctx.num_classes:
            raise ProfileError("profile", "method.beta_per_class", f"needs {ctx.num_classes} values (one per "
                               f"class of {ctx.profile.data.dataset}), got {len(betas)}")
        self.beta_per_class.copy_(torch.tensor(betas) if betas else torch.full_like(self.beta_per_class,
                                                                                    params.beta))
        self.scale = bool(getattr(params, "scale_by_one_plus_beta", False))
        # The forwards of the TRADES, CFA and FRL authors' TRADES losses (`form = "code"`), which matter for
        # BatchNorm's running statistics: the KL's target f(x) from a third train-mode forward of the
        # clean batch (clean, adversarial, clean), and (CFA's train_epoch) a train-mode forward of the
        # clean batch after the optimiser step, which also gives the training clean accuracy. CFA and FRL
        # set them for their own forms.
        self.kl_target_forward = getattr(params, "name", "") == "trades" and getattr(params, "form", "paper") == "code"
        self.clean_after_step = False

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        eps = self.eps_per_class[y]
        x_adv = self.attack.perturb(x, eps=eps, step=self.step_for(eps), draws=draws)
        logits_clean = model(x)
        logits_adv = model(x_adv)
        target = model(x) if self.kl_target_forward else logits_clean
        beta = self.beta_per_class[y]
        natural = ce_per_sample(logits_clean, y)
        robust = beta * trades_kl(logits_adv, target, self.ctx.kl)
        if self.scale:
            natural, robust = natural / (1 + beta), robust / (1 + beta)
        loss = weighted_mean(natural, self.weight_nat[y]) + weighted_mean(robust, self.weight_bndy[y])
        return StepOutput(loss, logits_adv.detach(), None if self.clean_after_step else logits_clean.detach(),
                          {"ce": natural.detach(), "kl": robust.detach()}, clean_after_step=self.clean_after_step)

    def method_state(self) -> dict[str, Any]:
        if getattr(self.params, "beta_per_class", ()):
            return {"beta_per_class": self.beta_per_class.tolist()}
        return {}


def initial_checkpoint(ref: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """What a fine-tune starts from, for `run_started`'s ``init``, and the checkpoint's state (None when it cannot
    be read: :func:`load_initial_weights` then says why, after `run_started`). The record names the file and its
    SHA-256, and when the file is a run's checkpoint, the run, which checkpoint ("best" or "last": a run folder
    gives its best) and the epoch it holds, so that a comparison can pair the fine-tune with the very checkpoint
    it started from (fairtui.judge.groups)."""
    from engine.runtime.checkpoint import CheckpointError, load_checkpoint, sha256_of

    try:
        path = resolve_init_checkpoint(ref)
    except ProfileError:
        return {}, None
    run_id, checkpoint = run_checkpoint(path) or (None, None)
    record: dict[str, Any] = {"from": ref, "file": str(path.resolve()), "sha256": sha256_of(path),
                              "run_id": run_id, "checkpoint": checkpoint, "epoch": None}
    try:
        state = load_checkpoint(path, "cpu")
    except CheckpointError:
        return record, None
    epoch = state.get("epoch")
    record["epoch"] = epoch if isinstance(epoch, int) else None
    return record, state


def load_initial_weights(model: torch.nn.Module, ref: str, device: torch.device,
                         state: dict[str, Any] | None = None) -> None:
    """The fine-tuned methods' (FRL, FAAL) starting weights: ``init_from``'s checkpoint (or its ``state``, read
    already by :func:`initial_checkpoint`) into ``model``. A checkpoint of another architecture is a ProfileError
    naming the key, not a traceback."""
    from engine.runtime.checkpoint import CheckpointError, load_checkpoint

    try:
        if state is None:
            state = load_checkpoint(resolve_init_checkpoint(ref), device)
        model.load_state_dict(state["model"])
    except CheckpointError as err:
        raise ProfileError("profile", "method.init_from", str(err)) from None
    except RuntimeError as err:  # load_state_dict: missing, unexpected or mis-shaped weights
        first = str(err).strip().splitlines()[0][:200]
        raise ProfileError("profile", "method.init_from", f"{ref}: its weights do not fit this profile's model "
                           f"({first}); the profile's [model] must be the checkpoint's architecture") from None


class FineTunePhase:
    """The fine-tune phase that FRL and FAAL share (and any plugin may): the run starts from ``init_from``'s
    weights, or pre-trains in the run for ``pretrain_epochs`` with ``pretrain_method`` (:func:`pretraining_method`)
    and then fine-tunes with a new optimiser; pre-training epochs are never selected as the best checkpoint
    (they are a plain PGD-AT / TRADES model). Mix in before the Method base; its params have ``init_from``,
    ``pretrain_epochs``, ``pretrain_method`` and ``pretrain_beta``; ``self.epoch`` is the current epoch, and the
    method calls :meth:`pretrain_loss` (or its own loss) and keeps ``self.pretrain`` from
    :meth:`start_fine_tune_phase`."""

    def start_fine_tune_phase(self, params: MethodParams, ctx: MethodContext) -> None:
        self.pretrain = pretraining_method(params, ctx)

    def pretraining(self, epoch: int) -> bool:
        return epoch <= self.p.pretrain_epochs

    def selectable(self, epoch: int) -> bool:
        """Only the method's own epochs: neither paper's selection covers a pre-training epoch."""
        return not self.pretraining(epoch)

    def fresh_optimizer(self, epoch: int) -> bool:
        """Fine-tuning after in-run pre-training starts with a new optimiser (both authors' codes)."""
        return self.p.pretrain_epochs > 0 and epoch == self.p.pretrain_epochs + 1

    def start_record(self) -> dict[str, Any]:
        """``init_from``'s checkpoint: which run, checkpoint and epoch, and its SHA-256 (:func:`initial_checkpoint`);
        the weights read here are the ones :meth:`initialize` loads."""
        if not self.p.init_from:
            return {}
        record, self._initial_state = initial_checkpoint(self.p.init_from)
        return record

    def initialize(self, model: torch.nn.Module) -> None:
        if self.p.init_from:
            state, self._initial_state = getattr(self, "_initial_state", None), None
            load_initial_weights(model, self.p.init_from, self.ctx.device, state)

    def pretrain_state(self) -> dict[str, Any]:
        return {"phase": f"pretrain ({self.p.pretrain_method})"}


def pretraining_method(params: MethodParams, ctx: MethodContext) -> Method | None:
    """The in-run pre-training of a fine-tuning method (FRL, FAAL): ``pretrain_method`` (PGD-AT, or TRADES
    at ``pretrain_beta``) for ``pretrain_epochs``; None without pre-training."""
    if not getattr(params, "pretrain_epochs", 0):
        return None
    if params.pretrain_method == "pgd_at":
        return PGDAT(PGDATParams(), ctx)
    return TRADES(TRADESParams(beta=params.pretrain_beta), ctx)
