"""AutoAttack (Croce & Hein) through `pyautoattack`, made safe for per-class evaluation.

- The model runs in eval mode (normalisation is already its first layer).
- AutoAttack reseeds the global RNG: the state is saved before and restored after.
- Its pre-flight checks log warnings on the "auto-attack" logger; they are passed
  on to the engine's log (and so to the user).
- With fewer than 10 classes the targeted attacks use K - 1 target classes.
"""

from __future__ import annotations

import logging

import torch

from engine.utils import eval_mode, rng_state, set_rng_state

FAST = ["apgd-ce", "apgd-t"]


def make_autoattack(model: torch.nn.Module, eps: float, norm: str, seed: int, num_classes: int, fast: bool,
                    device: torch.device):
    from pyautoattack import AutoAttack

    norm_name = {"linf": "Linf", "l2": "L2"}[norm]
    if fast:
        aa = AutoAttack(model, attacks=list(FAST), eps=eps, norm=norm_name, seed=seed, version="custom",
                        device=device)
        aa.apgd.n_restarts = 1  # as in the standard version
    else:
        aa = AutoAttack(model, eps=eps, norm=norm_name, seed=seed, version="standard", device=device)
    targets = min(9, num_classes - 1)
    aa.apgd_targeted.n_target_classes = targets
    aa.fab.n_target_classes = targets
    return aa


class AutoAttackAdapter:
    """``perturb(x, y) -> x_adv`` over one batch, with the RNG left as it was found."""

    def __init__(self, model: torch.nn.Module, settings, fast: bool = False):
        self.model, self.settings, self.fast = model, settings, fast
        logging.getLogger("auto-attack").setLevel(logging.INFO)

    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        saved = rng_state()
        try:
            with eval_mode(self.model):
                with torch.no_grad():
                    k = self.model(x[:1]).shape[1]
                aa = make_autoattack(self.model, self.settings.eps, self.settings.norm, self.settings.seed, k,
                                     self.fast, x.device)
                x_adv, _ = aa.run_standard_evaluation(x, y, batch_size=len(x))
        finally:
            set_rng_state(saved)
        return x_adv.detach()
