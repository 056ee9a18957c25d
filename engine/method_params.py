"""The `[method]` table of a profile: one frozen dataclass of parameters per method.

Torch-free (the command line checks profiles with it). The training code for
each name lives in `engine.methods`; a test keeps the two registries in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from engine.profile_schema import ProfileError, field


@dataclass(frozen=True)
class MethodParams:
    name: ClassVar[str] = ""

    def validate(self, file: str) -> None:
        """Check relations between keys; raise ProfileError."""

    def resolved(self) -> "MethodParams":
        """Fill defaults that depend on other keys, so the saved profile is explicit."""
        return self


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


@dataclass(frozen=True)
class FRLParams(MethodParams):
    """Fair Robust Learning (Xu et al. 2021, Sec. 4, Algorithm 1, Eq. 6-11).

    Training loss (the authors' code): class-weighted CE + beta * class-weighted KL,
    each normalised by the sum of its weights. Multipliers rise with the class's
    validation error above the class average (tau1 / tau2) and are projected
    onto {lambda >= 0, sum <= lambda_cap}.
    """

    name: ClassVar[str] = "frl"
    variant: str = field("reweight_remargin", choices=("reweight", "remargin", "reweight_remargin",
                                                        "baseline_reweight"))
    beta: float = field(1.5, min=0.0)
    tau1: float = field(0.05, min=0.0)
    tau2: float = field(0.05, min=0.0)
    alpha1: float = field(0.05, min=0.0)
    alpha2: float = field(0.05, min=0.0)
    alpha_margin: float = field(0.05, min=0.0)
    lambda_cap: float = field(0.5, gt=0.0)
    # Margins: "paper" eps_k = eps * clamp(exp(lambda_margin_k), margin_floor, margin_cap), fixed step;
    # "code" eps_k = eps * clamp(exp(2 lambda_margin_k), 0.98, 3) with step max(eps_k in batch) / 4.
    margin_form: str = field("paper", choices=("paper", "code"))
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

    def validate(self, file: str) -> None:
        if self.margin_floor > self.margin_cap:
            raise ProfileError(file, "method.margin_floor", f"must not exceed method.margin_cap "
                               f"({self.margin_cap}), got {self.margin_floor}")
        if self.init_from and self.pretrain_epochs:
            raise ProfileError(file, "method.init_from", "give either init_from or pretrain_epochs, not both")


CFA_LAMBDA1 = {"at": 0.5, "trades": 0.3, "fat": 0.7}  # CFA paper Sec. 6


@dataclass(frozen=True)
class CFAParams(MethodParams):
    """Class-wise Calibrated Fair Adversarial training (Wei et al. 2023) on AT, TRADES or FAT."""

    name: ClassVar[str] = "cfa"
    base: str = field("at", choices=("at", "trades", "fat"))
    ccm: bool = field(True)
    ccr: bool = field(True)  # TRADES only (resolved to false for AT and FAT)
    fawa: bool = field(True)
    lambda1: float = field(-1.0)  # < 0: the paper's value for the base (AT 0.5, TRADES 0.3, FAT 0.7)
    lambda2: float = field(0.5, min=0.0)
    beta: float = field(6.0, min=0.0)
    # Algorithm 1 calibrates from epoch 2 on (t_k of epoch 1); the authors' code starts at epoch 10.
    calibration_start_epoch: int = field(2, min=1)
    fawa_decay: float = field(0.85, min=0.0, max=1.0)  # authors' code: 0.88
    fawa_threshold: float = field(0.2, min=0.0, max=1.0)  # authors' code: 0.24
    fawa_start_epoch: int = field(50, min=1)  # authors' code: 1 (no start epoch)
    fat_tau: int = field(0, min=0)  # FAT: steps an attack continues after the first misclassification

    def resolved(self) -> "CFAParams":
        import dataclasses

        lambda1 = CFA_LAMBDA1[self.base] if self.lambda1 < 0 else self.lambda1
        # CCR calibrates TRADES betas: it has no meaning for AT or FAT, so it is off there.
        return dataclasses.replace(self, lambda1=lambda1, ccr=self.ccr and self.base == "trades")


@dataclass(frozen=True)
class WATParams(MethodParams):
    """Worst-class Adversarial Training (Li & Liu 2023): Hedge over K + 1 TRADES losses."""

    name: ClassVar[str] = "wat"
    eta: float = field(0.1, gt=0.0)
    beta: float = field(6.0, min=0.0)
    # "paper": sum_k w_k L_k with L_k the mean loss of the batch's class-k samples;
    # "code": (1/B) sum_n (w_{y_n} + w_0) * loss_n with the weights scaled to sum to K.
    loss_form: str = field("paper", choices=("paper", "code"))


METHOD_PARAMS: dict[str, type[MethodParams]] = {
    cls.name: cls for cls in (NaturalParams, PGDATParams, FATParams, TRADESParams, FRLParams, CFAParams,
                          WATParams)
}


__all__ = ["CFAParams", "FATParams", "FRLParams", "METHOD_PARAMS", "MethodParams", "NaturalParams", "PGDATParams",
           "ProfileError", "TRADESParams", "WATParams"]
