"""AutoAttack (Croce & Hein) through `pyautoattack`, made safe for per-class evaluation.

- The model runs in eval mode (normalisation is already its first layer).
- AutoAttack reseeds the global RNG: the state is saved before and restored after.
- Its pre-flight checks log warnings on the "auto-attack" logger; they are passed
  on to the engine's log (and so to the user).
- With fewer than 10 classes the targeted attacks use K - 1 target classes.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable

import torch

from engine.runtime.modes import eval_mode

from engine.runtime.seeding import rng_state, set_rng_state

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


def passes_per_image(aa, attack: str) -> int:
    """Forward (and backward) passes an AutoAttack attack spends on each image it attacks: its
    iterations x restarts x target classes (Square: its queries). The unit of the ETA's cost model."""
    if attack == "apgd-ce":
        return aa.apgd.n_iter * aa.apgd.n_restarts
    if attack == "apgd-t":
        return aa.apgd_targeted.n_iter * aa.apgd_targeted.n_target_classes * aa.apgd_targeted.n_restarts
    if attack == "fab-t":
        return aa.fab.n_iter * aa.fab.n_target_classes
    if attack == "square":
        return aa.square.n_queries
    return aa.apgd.n_iter


def cost_kind(attack: str) -> str:
    """Which attacks share a cost per pass (the ETA's model): the gradient attacks, or Square's queries."""
    return "queries" if attack == "square" else "gradient"


class AutoAttackProgress(logging.Handler):
    """Follows one `run_standard_evaluation` through the messages it logs: which attack runs, how many
    images are still robust after each, and an ETA; ``report(info)`` gets the state after each step.
    Other records (AutoAttack's pre-flight warnings) go on to the engine's log."""

    INITIAL = re.compile(r"initial accuracy: ([\d.]+)%")
    RUNNING = re.compile(r"running ([\w-]+)")
    AFTER = re.compile(r"robust accuracy after ([\w-]+): ([\d.]+)%")

    def __init__(self, aa, n: int, report: Callable[[dict], None]):
        super().__init__(logging.DEBUG)
        self.aa, self.report = aa, report
        self.info: dict = {"attacks": list(aa.attacks_to_run), "n": n, "robust": None, "current": None,
                           "done": [], "eta_s": None, "unmeasured": []}
        self.started = self.attack_started = time.time()
        self.robust_at_start = n

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.levelno >= logging.INFO:
            logging.getLogger("engine").handle(record)
            return
        if m := self.INITIAL.match(text):
            self.info["robust"] = self.robust_at_start = round(float(m.group(1)) / 100 * self.info["n"])
        elif m := self.RUNNING.match(text):
            self.info["current"] = m.group(1)
            self.attack_started, self.robust_at_start = time.time(), self.info["robust"] or 0
        elif m := self.AFTER.match(text):
            robust = round(float(m.group(2)) / 100 * self.info["n"])
            self.info["done"].append({"attack": m.group(1).lower(), "robust": robust,
                                      "time_s": round(time.time() - self.attack_started, 3)})
            self.info["robust"], self.info["current"] = robust, None
            self.info["eta_s"] = self.eta()
        else:
            return
        self.report(dict(self.info, done=[dict(d) for d in self.info["done"]], t=time.time()))  # a snapshot

    def eta(self) -> float | None:
        """Seconds for the attacks still to run whose kind has been timed: their passes on the images still
        robust, at the measured time per pass of the attacks of that kind done so far (None before one is
        done). Gradient attacks (APGD, FAB: a forward and a backward pass a step) and Square (a forward pass a
        query, and a Python loop over the images) cost differently a pass: an ETA made from APGD's rate said 52 s
        before a Square that took 145 s. A kind not yet timed is left out and named in ``unmeasured``."""
        spent: dict[str, float] = {}
        passes: dict[str, float] = {}
        robust = self.info["n"]
        for d in self.info["done"]:
            kind = cost_kind(d["attack"])
            passes[kind] = passes.get(kind, 0) + robust * passes_per_image(self.aa, d["attack"])
            spent[kind] = spent.get(kind, 0.0) + d["time_s"]
            robust = d["robust"]
        done = {d["attack"] for d in self.info["done"]}
        left = [a for a in self.info["attacks"] if a not in done]
        timed = {k for k in passes if passes[k] > 0 and spent[k] > 0}
        self.info["unmeasured"] = [a for a in left if cost_kind(a) not in timed]
        if not timed:
            return None
        return round(sum(self.info["robust"] * passes_per_image(self.aa, a) * spent[cost_kind(a)] / passes[cost_kind(a)]
                         for a in left if cost_kind(a) in timed), 1)


class AutoAttackAdapter:
    """``perturb(x, y) -> x_adv`` over one batch, with the RNG left as it was found. ``on_progress``, if
    set, is called with AutoAttackProgress's state as the attack goes (which attack, images still robust).
    ``check_stop``, if set, is called before every forward pass of the model inside the attack and raises to stop
    it: one AutoAttack batch (a class-balanced subset, whole) runs for many minutes, and a stop that waited for its
    end took 40 minutes on a busy machine; it now comes within one forward pass, between attacks, restarts and
    steps alike (the batches finished before are kept by the caller)."""

    def __init__(self, model: torch.nn.Module, settings, fast: bool = False):
        self.model, self.settings, self.fast = model, settings, fast
        self.on_progress: Callable[[dict], None] | None = None
        self.check_stop: Callable[[], None] | None = None

    def perturb(self, x: torch.Tensor, y: torch.Tensor, draws: Any = None) -> torch.Tensor:
        """``draws`` is not used: AutoAttack draws from its own generator, seeded by ``settings.seed``."""
        saved = rng_state()
        logger = logging.getLogger("auto-attack")
        level, propagate = logger.level, logger.propagate
        handler = None
        check = self.check_stop
        hook = self.model.register_forward_pre_hook(lambda module, args: check()) if check is not None else None
        try:
            with eval_mode(self.model):
                with torch.no_grad():
                    k = self.model(x[:1]).shape[1]
                aa = make_autoattack(self.model, self.settings.eps, self.settings.norm, self.settings.seed, k,
                                     self.fast, x.device)
                if self.on_progress is not None:
                    handler = AutoAttackProgress(aa, len(x), self.on_progress)
                    logger.addHandler(handler)
                    logger.setLevel(logging.DEBUG)  # its progress messages are debug records
                    logger.propagate = False  # the handler passes warnings on, not the debug chatter
                else:
                    logger.setLevel(logging.INFO)
                x_adv, _ = aa.run_standard_evaluation(x, y, batch_size=len(x))
        finally:
            if hook is not None:
                hook.remove()
            if handler is not None:
                logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
            set_rng_state(saved)
        return x_adv.detach()
