"""The `[method]` table of a profile: one frozen dataclass of parameters per method.

Torch-free (the command line checks profiles with it). The training code for
each name lives in `engine.methods`; a test keeps the two registries in step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Optional

from engine.contract.profile_schema import ProfileError, field


@dataclass(frozen=True)
class MethodParams:
    name: ClassVar[str] = ""

    def validate(self, file: str) -> None:
        """Check relations between keys; raise ProfileError."""

    def resolved(self) -> "MethodParams":
        """Fill defaults that depend on other keys, so the saved profile is explicit."""
        return self

    def form_values(self) -> dict[str, object]:
        """The values this method's `form` (paper or code) gives the keys the profile leaves unset."""
        return {}

    def train_defaults(self) -> dict[str, object]:
        """Values of `[train]` keys that this method's form sets where the profile leaves them unset."""
        return {}

    def reads_validation(self) -> str | None:
        """What of the method's training reads the validation split every epoch (a profile without one is refused),
        or None."""
        return None

    def validate_profile(self, profile: object, file: str) -> None:
        """Check the parameters against the rest of the resolved profile (``train.epochs``, ...); raise
        ProfileError naming the key."""


@dataclass(frozen=True)
class NaturalParams(MethodParams):
    name: ClassVar[str] = "natural"


@dataclass(frozen=True)
class PGDATParams(MethodParams):
    """Madry et al.: cross-entropy on PGD examples."""

    name: ClassVar[str] = "pgd_at"


@dataclass(frozen=True)
class FATParams(MethodParams):
    """Friendly adversarial training (Zhang et al. 2020): PGD stopped `tau` steps after misclassification."""

    name: ClassVar[str] = "fat"
    tau: int = field(0, min=0)


@dataclass(frozen=True)
class TRADESParams(MethodParams):
    """Zhang et al.; with `beta_per_class`, Tian et al.'s class-wise beta (Eq. 5)."""

    name: ClassVar[str] = "trades"
    beta: float = field(6.0, min=0.0)
    beta_per_class: tuple[float, ...] = field((), items_min=0.0)  # empty: beta for every class
    # The CFA authors' code divides the TRADES loss by (1 + beta); the original does not.
    scale_by_one_plus_beta: bool = field(False)
    # "code": yaodongyu/TRADES's trades_loss: three train-mode forwards (x for the CE, x' and x again for the KL,
    # whose target is that third forward) and its KLDivLoss (attack.kl "auto" -> "textbook"). "paper": two
    # forwards (x, x'), the KL's target the first, in log space. Loss and gradient agree; BatchNorm's running
    # statistics, which evaluation reads, do not.
    form: str = field("paper", choices=("paper", "code"))


# FRL's values that differ between the paper (Sec. 5.1, Eq. 11) and the authors' code
# (hannxu123/fair_robust, frlrmrw.py and utils_frl2.py). `form` picks a column; a key given
# explicitly in the profile wins over its form's value.
FRL_FORMS: dict[str, dict[str, object]] = {
    # tau1 = tau2 = 0.05, alpha1 = alpha2 = 0.05 (Sec. 5.1); Eq. 11 moves the margins with alpha2.
    "paper": {"tau1": 0.05, "tau2": 0.05, "alpha2": 0.05, "alpha_margin": 0.05, "alpha_schedule": "paper",
              "margin_form": "paper"},
    # lambda_bndy += rate1 * 2 * gamma; lambda_margin += rate2 * gamma (rate2 0.2); rate1 halved at FRL
    # epochs 40 and 80, rate2 never; eps * clamp(exp(2 lambda), 0.98, 3). tau: FRL_CODE_TAU.
    "code": {"alpha2": 0.1, "alpha_margin": 0.2, "alpha_schedule": "code", "margin_form": "code"},
}
# The code form's tau1 = tau2 (--bound0/--bound1) by variant, as the authors' scripts default it:
# frlrw.py (Reweight) 0.1, frlrmrw.py (Reweight + Remargin) 0.07. They ship no script for Remargin
# alone or for the baseline; those take the Reweight + Remargin script's 0.07.
FRL_CODE_TAU: dict[str, float] = {"reweight": 0.1, "reweight_remargin": 0.07, "remargin": 0.07,
                                  "baseline_reweight": 0.07}


@dataclass(frozen=True)
class FRLParams(MethodParams):
    """Fair Robust Learning (Xu et al. 2021, Sec. 4, Algorithm 1, Eq. 6-11).

    Training loss (the authors' code): class-weighted CE + beta * class-weighted KL,
    each normalised by the sum of its weights. Multipliers rise with the class's
    validation error above the class average (tau1 / tau2) and are projected
    onto {lambda >= 0, sum <= lambda_cap}. Keys left out take their value from
    `form` (FRL_FORMS): the paper's (default) or the authors' code.
    """

    name: ClassVar[str] = "frl"
    form: str = field("paper", choices=("paper", "code"))
    variant: str = field("reweight_remargin", choices=("reweight", "remargin", "reweight_remargin",
                                                        "baseline_reweight"))
    beta: float = field(1.5, min=0.0)
    tau1: Optional[float] = field(None, min=0.0)
    tau2: Optional[float] = field(None, min=0.0)
    alpha1: float = field(0.05, min=0.0)
    alpha2: Optional[float] = field(None, min=0.0)
    alpha_margin: Optional[float] = field(None, min=0.0)
    # How the alphas decay in fine-tuning: "paper" all three x decay_factor every decay_every epochs,
    # with the lr (Sec. 5.1); "code" alpha1 and alpha2 halved at fine-tuning epochs decay_every,
    # 2 decay_every, ... (the authors' `if now_epoch % 40 == 0: rate1 /= 2`), alpha_margin fixed.
    alpha_schedule: Optional[str] = field(None, choices=("paper", "code"))
    lambda_cap: float = field(0.5, gt=0.0)
    # Margins: "paper" eps_k = eps * clamp(exp(lambda_margin_k), margin_floor, margin_cap), fixed step;
    # "code" eps_k = eps * clamp(exp(2 lambda_margin_k), 0.98, 3) with step max(eps_k in batch) / 4.
    margin_form: Optional[str] = field(None, choices=("paper", "code"))
    margin_floor: float = field(1.0, min=0.0)
    margin_cap: float = field(2.0, gt=0.0)  # 2 * 8/255 = the paper's 16/255 cap
    # Schedule of the fine-tuning phase (paper Sec. 5.1): lr 1e-3, lr and alphas x0.1 every 40 epochs.
    finetune_lr: float = field(1e-3, gt=0.0)
    decay_every: int = field(40, min=1)
    decay_factor: float = field(0.1, gt=0.0, max=1.0)
    # Where the pre-trained robust model comes from: an earlier run (id, name or folder) or a
    # checkpoint file; or pre-train in this run for `pretrain_epochs` with `pretrain_method`.
    init_from: str = field("")
    pretrain_epochs: int = field(0, min=0)
    pretrain_method: str = field("pgd_at", choices=("pgd_at", "trades"))
    pretrain_beta: float = field(6.0, min=0.0)
    # After in-run pre-training: "fresh" starts fine-tuning with a new SGD (no momentum carried over),
    # as the authors' code builds one; "continue" keeps the pre-training optimiser's momentum.
    # (The paper is silent; `init_from` always starts a fresh optimiser.)
    finetune_optimizer: str = field("fresh", choices=("fresh", "continue"))

    def validate(self, file: str) -> None:
        if self.margin_floor > self.margin_cap:
            raise ProfileError(file, "method.margin_floor", f"must not exceed method.margin_cap "
                               f"({self.margin_cap}), got {self.margin_floor}")
        validate_fine_tune(self, file)

    def form_values(self) -> dict[str, object]:
        values = dict(FRL_FORMS[self.form])
        if self.form == "code":
            values.update(tau1=FRL_CODE_TAU[self.variant], tau2=FRL_CODE_TAU[self.variant])
        return values

    def resolved(self) -> "FRLParams":
        return dataclasses.replace(self, **_unset(self, self.form_values()))

    def reads_validation(self) -> str | None:
        return "the validation errors that move its multipliers"


def _unset(params: MethodParams, values: dict[str, object]) -> dict[str, object]:
    """The values of ``values`` whose keys ``params`` leaves unset (None)."""
    return {key: value for key, value in values.items() if getattr(params, key) is None}


CFA_LAMBDA1 = {"at": 0.5, "trades": 0.3, "fat": 0.7}  # CFA paper Sec. 6
# CFA's values that differ between the paper (Algorithm 1, Sec. 6) and the authors' code (PKU-ML/CFA,
# train.py's argparse defaults). A key given explicitly in the profile wins over its form's value.
CFA_FORMS: dict[str, dict[str, object]] = {
    "paper": {"calibration_start_epoch": 2, "fawa_decay": 0.85, "fawa_threshold": 0.2, "fawa_start_epoch": 50},
    # `if epoch >= args.begin` with a 0-based epoch and begin 10: the 11th epoch is the first calibrated.
    # --decay-rate 0.88, --threshold 0.24, FAWA from the first epoch, --lambda-1 0.5 for every base.
    "code": {"calibration_start_epoch": 11, "fawa_decay": 0.88, "fawa_threshold": 0.24, "fawa_start_epoch": 1,
             "lambda1": 0.5},
}


# The `[train]` keys that each CFA form sets (where the profile leaves them unset): the EMA baseline,
# which the paper starts with its weight averaging at epoch 50 (decay 0.85) and the authors' train.py
# updates from the first epoch with FAWA's --decay-rate 0.88; and, for AT and FAT, the authors'
# training attacks in BatchNorm train mode (their train_epoch; their TRADES attack runs in eval mode).
CFA_TRAIN_FORMS: dict[str, dict[str, object]] = {
    "paper": {"ema_decay": 0.85, "ema_start_epoch": 50},
    "code": {"ema_decay": 0.88, "ema_start_epoch": 1},
}


@dataclass(frozen=True)
class CFAParams(MethodParams):
    """Class-wise Calibrated Fair Adversarial training (Wei et al. 2023) on AT, TRADES or FAT.

    Keys left out take their value from `form` (CFA_FORMS): the paper's (default) or the
    authors' code. The form also sets `[train]` keys the profile leaves out (CFA_TRAIN_FORMS): the
    EMA baseline, and for `form = "code"` on AT and FAT the training attacks in BatchNorm train
    mode (`train.attack_mode`), as the authors' `train_epoch` runs them.
    """

    name: ClassVar[str] = "cfa"
    form: str = field("paper", choices=("paper", "code"))
    base: str = field("at", choices=("at", "trades", "fat"))
    ccm: bool = field(True)
    ccr: bool = field(True)  # TRADES only (resolved to false for AT and FAT)
    fawa: bool = field(True)
    lambda1: Optional[float] = field(None, min=0.0)  # paper: by base (AT 0.5, TRADES 0.3, FAT 0.7)
    lambda2: float = field(0.5, min=0.0)
    beta: float = field(6.0, min=0.0)
    # The first epoch (1-based) that trains with calibrated margins and betas, from the previous
    # epoch's t_k. Algorithm 1: 2 (after every epoch); the authors' code: 11.
    calibration_start_epoch: Optional[int] = field(None, min=1)
    fawa_decay: Optional[float] = field(None, min=0.0, max=1.0)
    fawa_threshold: Optional[float] = field(None, min=0.0, max=1.0)
    fawa_start_epoch: Optional[int] = field(None, min=1)
    # FAT: steps an attack continues after the first misclassification. The paper gives no value;
    # the authors' code uses --tau 3.
    fat_tau: int = field(3, min=0)

    def form_values(self) -> dict[str, object]:
        values = {**CFA_FORMS[self.form]}
        values.setdefault("lambda1", CFA_LAMBDA1[self.base])
        return values

    def resolved(self) -> "CFAParams":
        # CCR calibrates TRADES betas: it has no meaning for AT or FAT, so it is off there.
        return dataclasses.replace(self, **_unset(self, self.form_values()), ccr=self.ccr and self.base == "trades")

    def train_defaults(self) -> dict[str, object]:
        values = dict(CFA_TRAIN_FORMS[self.form])
        if self.form == "code" and self.base in ("at", "fat"):
            values["attack_mode"] = "train"
        return values

    def reads_validation(self) -> str | None:
        return "FAWA's check of each epoch's weights; method.fawa = false needs none" if self.fawa else None


@dataclass(frozen=True)
class WATParams(MethodParams):
    """Worst-class Adversarial Training (Li & Liu 2023): Hedge over K + 1 TRADES losses."""

    name: ClassVar[str] = "wat"
    eta: float = field(0.1, gt=0.0)
    beta: float = field(6.0, min=0.0)
    # "paper": sum_k w_k L_k with L_k the mean loss of the batch's class-k samples;
    # "code": (1/B) sum_n (w_{y_n} + w_0) * loss_n with the weights scaled to sum to K.
    loss_form: str = field("paper", choices=("paper", "code"))

    def reads_validation(self) -> str | None:
        return "the Hedge weights' validation costs"


# DAFA's values that differ between the paper (README Algorithms 1-2) and the authors' code
# (rucy74/DAFA @ c60ba83; docs/reference/methods-dafa-faal.md). A key given explicitly in the profile wins.
DAFA_FORMS: dict[str, dict[str, object]] = {
    "paper": {"tie_rule": "skip", "pgd_second_step": False},
    # utils.py l.50-51: the else branch takes ties; losses.py l.113-114: PGD-AT's second, unweighted move.
    "code": {"tie_rule": "subtract", "pgd_second_step": True},
}


@dataclass(frozen=True)
class DAFAParams(MethodParams):
    """Distance-Aware Fair Adversarial training (Lee et al., ICLR 2024) on TRADES or PGD-AT.

    Class weights W from the warm-up's class-mean adversarial softmax matrix, computed once after
    epoch `warmup_epochs` (tau): margin W_y eps, step W_y alpha, W_y on the natural CE."""

    name: ClassVar[str] = "dafa"
    form: str = field("paper", choices=("paper", "code"))
    base: str = field("trades", choices=("trades", "pgd_at"))
    dafa_lambda: float = field(1.0, min=0.0)  # the code: 1.0 on CIFAR-10, 1.5 on CIFAR-100 and STL-10
    warmup_epochs: int = field(70, min=1)  # tau; the code's --dafa_warmup 70 (the paper's value unknown)
    beta: float = field(6.0, min=0.0)  # TRADES
    tie_rule: Optional[str] = field(None, choices=("skip", "subtract"))
    # "legacy_code": the subtract term of the code before commit 74657cd (-p_i(j) p_j(j)); which of the
    # two produced the paper's table is unknown.
    weight_formula: str = field("paper", choices=("paper", "legacy_code"))
    pgd_second_step: Optional[bool] = field(None)  # PGD-AT base only
    # No clamp in the paper or the code: a weight <= 0 fails the run unless this floor is set.
    weight_floor: Optional[float] = field(None, gt=0.0)

    def form_values(self) -> dict[str, object]:
        return dict(DAFA_FORMS[self.form])

    def resolved(self) -> "DAFAParams":
        out = dataclasses.replace(self, **_unset(self, self.form_values()))
        return dataclasses.replace(out, pgd_second_step=bool(out.pgd_second_step) and self.base == "pgd_at")

    def validate_profile(self, profile, file: str) -> None:
        epochs = profile.train.epochs
        if self.warmup_epochs >= epochs:
            raise ProfileError(file, "method.warmup_epochs", f"a warm-up of {self.warmup_epochs} epochs leaves no "
                               f"DAFA epoch in train.epochs ({epochs}): lower it or raise train.epochs")


@dataclass(frozen=True)
class FAALParams(MethodParams):
    """Fairness-Aware Adversarial Learning (Zhang et al., CVPR 2024): a fine-tune of a robust model whose
    per-batch loss weights come from the worst class distribution in a KL ball around uniform."""

    name: ClassVar[str] = "faal"
    base: str = field("at", choices=("at", "trades"))  # every released run fine-tunes with AT
    radius: float = field(0.5, min=0.0)  # r: the README and run scripts (the argparse default is 1)
    beta: float = field(6.0, min=0.0)  # TRADES (hard-coded 6 in the code)
    # "code": c_k = n_k l_k, the sum of the class's margins (FAAL.py l.58); "class_mean": c_k = l_k.
    class_scores: str = field("code", choices=("code", "class_mean"))
    bisection_steps: int = field(64, min=8, max=200)
    # The fine-tune (ft_prn.py): a new SGD at finetune_lr, x finetune_gamma at each of ft_prn.py's milestones
    # for the fine-tune's length (engine.methods.faal.ft_prn_milestones; 2 epochs: the second).
    finetune_lr: float = field(0.01, gt=0.0)
    finetune_gamma: float = field(0.1, gt=0.0, max=1.0)
    # "avg_worst" (the engine's rule, the code's both_best) or "worst" (the run scripts' worst_best).
    select: str = field("avg_worst", choices=("avg_worst", "worst"))
    # Where the robust model comes from: an earlier run or an imported model (id, name, folder or .pt),
    # or pre-training in this run for `pretrain_epochs` with `pretrain_method`.
    init_from: str = field("")
    pretrain_epochs: int = field(0, min=0)
    pretrain_method: str = field("pgd_at", choices=("pgd_at", "trades"))
    pretrain_beta: float = field(6.0, min=0.0)

    def validate(self, file: str) -> None:
        validate_fine_tune(self, file)


def validate_fine_tune(params: MethodParams, file: str) -> None:
    """A fine-tuning method's (FRL, FAAL; engine.methods.standard.FineTunePhase) start: an earlier model
    (``init_from``) or pre-training in the run (``pretrain_epochs``), not both."""
    if params.init_from and params.pretrain_epochs:
        raise ProfileError(file, "method.init_from", "give either init_from or pretrain_epochs, not both")


@dataclass(frozen=True)
class ImportedParams(MethodParams):
    """A model fairtui did not train (`fairtui import`): evaluated, listed and compared, never trained."""

    name: ClassVar[str] = "imported"


__all__ = ["CFAParams", "CFA_TRAIN_FORMS", "DAFAParams", "FAALParams", "FATParams", "FRLParams", "ImportedParams",
           "MethodParams", "NaturalParams", "PGDATParams", "ProfileError", "TRADESParams", "WATParams"]
