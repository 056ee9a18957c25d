"""The `[method]` tables of the methods of 2023-2025 whose authors' code is their reference (BAT, CSR, TRIX,
ABSLD): one frozen dataclass of parameters each, torch-free, as engine.contract.method_params's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from engine.contract.method_params import DAFAParams, MethodParams, validate_fine_tune
from engine.contract.profile_schema import ProfileError, field


@dataclass(frozen=True)
class BATParams(MethodParams):
    """BAT (Sun et al., AAAI 2023), as its authors' code trains it (docs/reference/methods-bat-csr.md): two
    early-stopped TRADES attacks per batch (the last example still classified right, and the first past
    the boundary) and CE(last clean) + beta KL(clean || first adversarial) + the two predictions' KL to the
    uniform distribution. The paper's rule could not be read: there is no `form`."""

    name: ClassVar[str] = "bat"
    beta: float = field(6.0, min=0.0)
    # FAT's counter of the first-adversarial attack: steps taken past the first misclassified check (code: 1)
    firstadv_tau: int = field(1, min=0)
    uniform_weight: float = field(1.0, min=0.0)  # the two uniform KL terms' weight (code: 1, no parameter)


@dataclass(frozen=True)
class CSRParams(MethodParams):
    """CSR (Jin et al., ICLR 2025), as its authors' code trains it (docs/reference/methods-bat-csr.md): a
    fine-tune on TRADES; before every epoch the robust confusion matrix C of the training split (PGD in
    eval mode, the true class's logit scaled by `true_logit_scale`), G = u1 v1^T of C's top singular pair
    rescaled to [g_low, g_low + g_span], and the loss natural_weight CE + beta KL + spectral_weight
    (1/B) sum_i g_i (ln g_i - ln p_{y_i}(x'_i)), g_i = G[pred_i, y_i]. The paper's rule could not be read:
    there is no `form`."""

    name: ClassVar[str] = "csr"
    beta: float = field(6.0, min=0.0)
    natural_weight: float = field(0.7, min=0.0)
    spectral_weight: float = field(0.3, min=0.0)
    true_logit_scale: float = field(0.9, gt=0.0)  # the code's gamma_true: the true class's logit x 0.9 in C
    g_low: float = field(0.01, gt=0.0)
    g_span: float = field(2.0, gt=0.0)
    confusion_steps: int = field(10, min=1)  # PGD steps of the confusion pass (step: [attack] step)
    # The fine-tune (train_fair.py): finetune_lr (1e-3) for every fine-tuning epoch (2 in the code); a new SGD
    # after in-run pre-training.
    finetune_lr: float = field(1e-3, gt=0.0)
    init_from: str = field("")
    pretrain_epochs: int = field(0, min=0)
    pretrain_method: str = field("pgd_at", choices=("pgd_at", "trades"))
    pretrain_beta: float = field(6.0, min=0.0)

    def validate(self, file: str) -> None:
        validate_fine_tune(self, file)
        if not self.init_from and not self.pretrain_epochs:
            raise ProfileError(file, "method.init_from", "CSR fine-tunes a robust model: give init_from (a TRADES "
                               "run, an imported model or a .pt file) or pretrain_epochs")



@dataclass(frozen=True)
class TRIXParams(DAFAParams):
    """TRIX (Medi, Jung and Keuper, 2025), as its authors' code trains it (Fairness-a11y/TRIX, losses.py
    ``mixed_trades_loss``; docs/reference/methods-trix-absld.md): DAFA on TRADES (its class weights, margins and
    steps, its warm-up and forms), with each batch's attack mixed: the samples whose class weight from the batch's
    clean predictions (DAFA's rule on their class means) is below the batch's mean take a targeted PGD step toward
    a uniformly drawn other class, the rest the untargeted TRADES step. ``targeted = false`` is DAFA."""

    name: ClassVar[str] = "trix"
    targeted: bool = field(True)

    def validate(self, file: str) -> None:
        if self.base != "trades":
            raise ProfileError(file, "method.base", f"TRIX mixes TRADES's attack (its code's --loss mixed): the "
                               f"base must be trades, got {self.base}")


@dataclass(frozen=True)
class ABSLDParams(MethodParams):
    """ABSLD (Zhao, Duan, Wang and Wei, NeurIPS 2024), Anti-Bias Soft Label Distillation
    (docs/reference/methods-trix-absld.md): a student learns a frozen robust teacher's soft labels of the clean
    images, tempered per class, adv_weight KL on adversarial inputs (which maximise that KL) + (1 - adv_weight)
    KL on clean ones; after every epoch each class's temperature moves against its loss gap to the mean, for the
    adversarial and the clean term apart (rate ``temp_rate``, times ``temp_rate_decay`` at each lr drop,
    clamped to [temp_min, temp_max]). ``form = "code"`` is zhaoshiji123/ABSLD's arithmetic where it differs."""

    name: ClassVar[str] = "absld"
    # The run (id, name or folder) or a run's checkpoint the student distils from; its profile.toml gives the
    # teacher's architecture, which may differ from the student's.
    teacher: str = field("")
    # "code": both terms' soft labels are the teacher's logits divided by T_adv * T_nat (the code's two
    # tempered copies share one tensor, so the in-place divisions compound), the KL as log(softmax) with
    # b log(b + 1e-5); "paper": each term its own temperature, the KL in log space.
    form: str = field("paper", choices=("paper", "code"))
    adv_weight: float = field(5.0 / 6.0, min=0.0, max=1.0)
    temp_init: float = field(1.0, gt=0.0)
    temp_rate: float = field(0.1, min=0.0)
    temp_rate_decay: float = field(0.1, gt=0.0, max=1.0)
    temp_min: float = field(0.5, gt=0.0)
    temp_max: float = field(5.0, gt=0.0)

    def validate(self, file: str) -> None:
        if not self.teacher:
            raise ProfileError(file, "method.teacher", "ABSLD distils a robust teacher: give method.teacher (a run "
                               "id or name, a run folder or a run's checkpoint)")
        if self.temp_min > self.temp_max:
            raise ProfileError(file, "method.temp_min", f"must not exceed method.temp_max ({self.temp_max}), "
                               f"got {self.temp_min}")
        if not self.temp_min <= self.temp_init <= self.temp_max:
            raise ProfileError(file, "method.temp_init", f"must lie in [temp_min, temp_max] = [{self.temp_min}, "
                               f"{self.temp_max}], got {self.temp_init}")


__all__ = ["ABSLDParams", "BATParams", "CSRParams", "TRIXParams"]
