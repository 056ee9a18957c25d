"""What a training method is: a loss on a batch plus class-wise state between epochs.

The loop owns the optimiser, the schedule and the model's mode; a method only
computes a loss (timm's training-task split). Class-wise methods change three
per-class vectors that the shared losses read: ``eps_per_class`` (margins),
``weight_nat`` / ``weight_bndy`` (loss weights) and ``beta_per_class`` (TRADES betas).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from engine.attacks.noise import WHOLE, Draws
from engine.contract.config import AttackConfig, Profile, training_attack_mode
from engine.contract.method_params import MethodParams

Tensor = torch.Tensor


@dataclass
class StepOutput:
    loss: Tensor  # scalar
    logits_adv: Tensor | None  # [B, K] the training adversarial predictions
    logits_clean: Tensor | None  # [B, K]
    extra: dict[str, Tensor] = field(default_factory=dict)
    # The loop measures the clean predictions with a train-mode forward after the optimiser step.
    clean_after_step: bool = False


@dataclass
class ValResult:
    """Per-class accuracies on the validation split, measured by the loop after every epoch."""

    clean_acc_per_class: list[float]
    robust_acc_per_class: list[float]


@dataclass
class MethodContext:
    num_classes: int
    profile: Profile
    device: torch.device
    # The validation split, for methods that measure more than the loop does (WAT's TRADES losses).
    val: Any = None  # engine.data.TensorData
    # This process's place in a multi-process run (engine.training.distributed.Group); None: one process.
    group: Any = None
    # The module every attack of the method runs (the trainer's attack view: the model, maybe compiled,
    # never DDP); the attacks get it when they are built. None: a method used on its own (tests), whose
    # caller sets it with Method.use_attack_model.
    attack_model: Any = None
    # The data set's class names, for messages that name a class (None: by index).
    class_names: Any = None
    # The data's splits (engine.data.Splits: input shape, normalisation), for a model the method builds itself
    # (ABSLD's teacher). None: a method used on its own.
    splits: Any = None

    @property
    def attack(self) -> AttackConfig:
        return self.profile.attack

    @functools.cached_property
    def kl(self) -> str:
        """The TRADES KL's form (``attack.kl``, resolved once: engine.contract.config.trades_kl_form); the losses
        read it every batch."""
        from engine.contract.config import trades_kl_form

        return trades_kl_form(self.profile)

    @property
    def training_attack_mode(self) -> str:
        """The mode training attacks run the model in (``train.attack_mode``, resolved)."""
        return training_attack_mode(self.profile)

    def val_batches(self) -> Iterator[tuple[Tensor, Tensor, Draws]]:
        """The validation split in evaluation-sized batches, on the device. x: [B, ...], y: [B], and
        the draws the batch's attack takes.

        In a multi-process run, this rank's shard of every batch, with the attacks' random starts
        drawn as for the whole batch: the caller all-reduces what it sums (``group.sum_``)."""
        bs = self.profile.data.eval_batch_size
        for start in range(0, len(self.val), bs):
            n = min(bs, len(self.val) - start)
            draws = self.group.draws(n) if self.group is not None else Draws(0, n)
            yield (self.val.images(slice(start + draws.lo, start + draws.hi)).to(self.device),
                   self.val.y[start + draws.lo:start + draws.hi].to(self.device), draws)


def weighted_mean(values: Tensor, weights: Tensor) -> Tensor:
    """sum(w * v) / sum(w): FRL's normalised class-weighted loss; the plain mean for equal weights."""
    return (weights * values).sum() / weights.sum().clamp_min(1e-12)


class Method:
    """Base class. Subclasses set ``name`` and implement :meth:`loss`."""

    name: str = ""
    # Measure the validation split before the first epoch too (FRL updates from it).
    needs_initial_val: bool = False

    def __init__(self, params: MethodParams, ctx: MethodContext):
        self.params = params
        self.ctx = ctx
        k, dev = ctx.num_classes, ctx.device
        self.eps_per_class = torch.full((k,), ctx.attack.eps, device=dev)
        self.weight_nat = torch.ones(k, device=dev)
        self.weight_bndy = torch.ones(k, device=dev)
        self.beta_per_class = torch.zeros(k, device=dev)

    # -- per batch ------------------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        """The loss on one batch (this rank's shard of it). ``model``: what the loss forwards run (DDP
        in a multi-process run); the attacks run ``ctx.attack_model``, and take their random draws
        from ``draws``."""
        raise NotImplementedError

    def use_attack_model(self, model: torch.nn.Module) -> "Method":
        """Run every attack of this method (and of the methods it wraps) on ``model``: for a method
        used outside the trainer, whose context has no attack model."""
        for value in vars(self).values():
            if isinstance(value, Method) and value is not self:
                value.use_attack_model(model)
            elif hasattr(value, "perturb") and hasattr(value, "model"):
                value.model = model
        return self

    def step_for(self, eps: Tensor) -> Tensor | float:
        """The attack step for these per-sample margins (the profile's fixed step by default)."""
        return self.ctx.attack.step

    # -- between epochs -------------------------------------------------------------------------
    def start_record(self) -> dict[str, Any]:
        """What a fresh run starts from beyond its profile, recorded as `run_started`'s ``init`` (a fine-tune's
        checkpoint); called just before :meth:`initialize`. Empty: nothing to record."""
        return {}

    def run_record(self) -> dict[str, Any]:
        """Fields of `run_started` beyond its profile that the method adds (a distillation's ``teacher``)."""
        return {}

    def initialize(self, model: torch.nn.Module) -> None:
        """Called once when a run starts fresh (not on resume): e.g. load a pre-trained model."""

    def lr_for(self, epoch: int, scheduled_lr: float) -> float:
        """The learning rate of ``epoch``; the profile's schedule unless the method has its own."""
        return scheduled_lr

    def fresh_optimizer(self, epoch: int) -> bool:
        """Whether ``epoch`` starts with a new optimiser (momentum dropped), e.g. FRL's fine-tuning."""
        return False

    def prepare_epoch(self, epoch: int, batches: Any) -> None:
        """Before epoch ``epoch`` trains (after :meth:`start_epoch`): ``batches()`` iterates over the epoch's
        training batches, in its order and augmentation, as (x, y, draws) of this rank's rows (the caller
        sums across the ranks what it counts: ``ctx.group``). The trainer times it (the epoch event's
        ``prepare_s``). Default: nothing; CSR builds its confusion matrix here."""

    def start_epoch(self, epoch: int, val: ValResult | None) -> None:
        """Set the class-wise state epoch ``epoch`` (1-based) trains with."""

    def end_epoch(self, epoch: int, model: torch.nn.Module, train_robust_acc: list[float | None],
                  val: ValResult) -> None:
        """Measure what the next epoch needs (after the loop's validation pass)."""

    def method_state(self) -> dict[str, Any]:
        """The class-wise state for the `epoch_end` event (names fixed by the event stream's contract)."""
        return {}

    def measurements(self) -> dict[str, Any]:
        """What end_epoch measured in this epoch, merged into the epoch's `method_state`."""
        return {}

    def selectable(self, epoch: int) -> bool:
        """Whether ``epoch`` may become the best checkpoint (FRL: not its in-run pre-training)."""
        return True

    def selection_score(self, val: ValResult) -> float:
        """Higher is better: the best checkpoint maximises validation average + worst robust accuracy."""
        from engine.runtime import metrics

        acc = val.robust_acc_per_class  # a class without validation samples (None) is left out
        return metrics.average(acc) + metrics.worst(acc)

    def never_acted(self, epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The mechanisms of this method that never acted in the run, read from its ``epoch_end`` events: each a
        dict with ``mechanism``, ``reason`` (one line) and ``checkpoint`` (the one it would have made, or None).
        The final evaluation records each as a ``mechanism_inactive`` event; most methods have none."""
        return []

    def averaged_models(self) -> dict[str, dict[str, Tensor]]:
        """Extra weights to evaluate at the end (e.g. CFA's FAWA), by checkpoint name."""
        return {}

    # -- checkpoint -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"eps_per_class": self.eps_per_class, "weight_nat": self.weight_nat,
                "weight_bndy": self.weight_bndy, "beta_per_class": self.beta_per_class}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("eps_per_class", "weight_nat", "weight_bndy", "beta_per_class"):
            getattr(self, key).copy_(state[key])

    def batch_state(self) -> dict[str, Tensor]:
        """What :meth:`loss` has gathered over the epoch's batches so far (sums for :meth:`end_epoch` or
        :meth:`measurements`), for a stop inside an epoch (engine.runtime.checkpoint's ``partial.pt``): the
        resumed epoch restores it after :meth:`start_epoch` and :meth:`prepare_epoch` and continues.
        A method whose loss changes no state of its own (most) has none. A method that gathers
        something per batch and leaves it out resumes a stopped epoch with part of its sums lost."""
        return {}

    def load_batch_state(self, state: dict[str, Tensor]) -> None:
        for key, value in state.items():
            getattr(self, key).copy_(value)


class Imported(Method):
    """An imported model (`fairtui import`): it has weights to evaluate and nothing to train."""

    name = "imported"

    def loss(self, model: torch.nn.Module, x: Tensor, y: Tensor, draws: Draws = WHOLE) -> StepOutput:
        raise RuntimeError("an imported model does not train (fairtui import, then fairtui eval)")


def clean_predictions(model: torch.nn.Module, x: Tensor) -> Tensor:
    """Clean logits in eval mode without gradients, for per-class training clean accuracy. [B, K]"""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(x)
    model.train(was_training)
    return logits


def ce_per_sample(logits: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(logits, y, reduction="none")
