"""How much of a run each method's class-wise mechanism acts in, from the resolved profile alone.

The scaled protocols' rule (docs/profiles-and-methods.md, "Scaled protocols keep each mechanism acting"): a
profile that shrinks a paper's setting keeps each method's mechanism acting in at least half the share that the
authors' setting gives it. The shares, each computed here from a resolved profile and nothing else:

- DAFA: the share of the run's summed learning rate that trains with the class weights W (the epochs after
  the warm-up). The authors' code (110 epochs, warm-up 70, lr 0.1 to epoch 99, 0.01 to 104, 0.001 after):
  2.956 of 9.956, 29.7%.
- FRL: the multipliers' summed step over the fine-tune (alpha1 times its decay, every fine-tuning epoch)
  against the paper's 40 epochs at 0.05 before its first decay (2.0), the step that carries lambda to its cap.
- ABSLD: how far its temperatures can move over the run (the summed rate of its updates) against the distance from
  their start to the lower clamp (1 to 0.5): the authors' setting (300 epochs, rate 0.1, x0.1 at epochs 215,
  260 and 285) moves them up to 21.88, 44 times that distance (share 1).
- CFA: the share of the epochs in which FAWA may fold a checkpoint in (from `fawa_start_epoch`): the paper's
  epochs 50-200 of 200, 75.5%. Whether its gate can open at the protocol's accuracies is a property of data, not
  of the profile: the profiles' tests read it from the protocol's committed base runs.

Torch-free, like the rest of engine.contract: the app and the tests read it without the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.contract.config import Profile

RULE = 0.5  # a scaled protocol keeps at least this fraction of the authors' share
DAFA_CODE_SHARE = 2.956 / 9.956  # epochs 71-110 of the code's schedule: 29 x 0.1 + 5 x 0.01 + 6 x 0.001
FRL_PAPER_STEP = 40 * 0.05  # Sec. 5.1: alpha 0.05 for the first 40 fine-tuning epochs
FAWA_PAPER_SHARE = 151 / 200  # averaging from epoch 50 of 200 (paper Sec. 5)


@dataclass(frozen=True)
class Share:
    """One mechanism's share of a run beside the authors' setting's, and what it measures."""

    mechanism: str
    share: float
    authors: float
    measures: str

    @property
    def holds(self) -> bool:
        return self.share >= RULE * self.authors - 1e-12


def scheduled_lr(epoch: int, profile: Profile) -> float:
    """The learning rate of epoch ``epoch`` (1-based) by the profile's schedule: a pure function, so a resume
    needs no state (a method with its own schedule, FRL's fine-tune, overrides it: Method.lr_for)."""
    t = profile.train
    if t.schedule == "piecewise":
        return t.lr * t.gamma ** sum(epoch > m for m in t.milestones)
    if t.schedule == "cosine":
        return t.lr * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / t.epochs))
    return t.lr


def dafa_share(profile: Profile) -> Share:
    lrs = [scheduled_lr(e, profile) for e in range(1, profile.train.epochs + 1)]
    weighted = sum(lrs[profile.method.warmup_epochs:])
    return Share("dafa class weights", weighted / sum(lrs), DAFA_CODE_SHARE, "share of the summed lr trained with W")


def frl_alpha_scale(epoch: int, method) -> float:
    """The factor on alpha1 and alpha2 in fine-tuning epoch ``epoch``: FRL's own (its alpha_scales) and the rule's."""
    if method.alpha_schedule == "code":  # halved at fine-tuning epochs decay_every, 2 decay_every, ...
        return 0.5 ** ((epoch - method.pretrain_epochs) // method.decay_every)
    return method.decay_factor ** ((epoch - method.pretrain_epochs - 1) // method.decay_every)


def frl_share(profile: Profile) -> Share:
    m = profile.method.resolved()
    summed = sum(m.alpha1 * frl_alpha_scale(e, m) for e in range(m.pretrain_epochs + 1, profile.train.epochs + 1))
    return Share("frl multipliers", min(summed / FRL_PAPER_STEP, 1.0), 1.0,
                 "the multipliers' summed step against the paper's first 40 epochs (2.0)")


def fawa_share(profile: Profile) -> Share:
    m = profile.method.resolved()
    epochs = profile.train.epochs
    share = max(epochs - m.fawa_start_epoch + 1, 0) / epochs if m.fawa else 0.0
    return Share("cfa fawa", share, FAWA_PAPER_SHARE, "share of the epochs FAWA may fold in")


def absld_temperature_travel(profile: Profile) -> float:
    """How far ABSLD's temperatures can move over the run: the summed rate of its updates (temp_rate, times
    temp_rate_decay at each lr milestone), the most the class with the largest loss gap moves."""
    m, t = profile.method, profile.train
    drops = (lambda e: sum(e >= k for k in t.milestones)) if t.schedule == "piecewise" else (lambda e: 0)
    return sum(m.temp_rate * m.temp_rate_decay ** drops(e) for e in range(1, t.epochs + 1))


def absld_share(profile: Profile) -> Share:
    m = profile.method
    reach = absld_temperature_travel(profile) / max(m.temp_init - m.temp_min, 1e-12)
    return Share("absld temperatures", min(reach, 1.0), 1.0,
                 "the temperatures' summed move against the distance to their lower clamp")


def mechanism_shares(profile: Profile) -> list[Share]:
    """Every class-wise mechanism of the profile's method whose share the rule covers (empty for the rest)."""
    name = profile.method.name
    if name in ("dafa", "trix"):  # TRIX's targets act in every epoch; its class weights are DAFA's
        return [dafa_share(profile)]
    if name == "absld":
        return [absld_share(profile)]
    if name == "frl" and profile.method.variant != "baseline_reweight":
        return [frl_share(profile)]
    if name == "cfa" and profile.method.fawa:
        return [fawa_share(profile)]
    return []
