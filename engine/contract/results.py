"""What makes an `eval_result` the number it is, and which results are a run's headline.

Torch-free: the engine writes a result's ``setting`` with it, and every reader (ls, show, compare,
export, the index, the app) decides with :func:`is_headline` which results speak for the run.

A result's identity is its split, checkpoint, the checkpoint's epoch, the attack, and its
``setting``: everything else that changes the number. That is the eps and norm; the attack's
own settings (step, restarts, CW's kappa, Temperature-PGD's 1/T); the subset (images per class
and the seed that picked them); the batch size wherever batching changes the random draws (PGD's
random start, and AutoAttack, which reseeds per internal batch); and the attack seed.

A *headline* result is one at the profile's own settings on the whole split (or on the fixed class-balanced part
of it that the profile's ``data.test_per_class`` names, recorded in the setting as ``split_per_class``). Only headline
results are the run's numbers; any other result is exploratory and is shown labelled with what
differs from the profile.
"""

from __future__ import annotations

import math
from typing import Any

from engine.contract import attacks
from engine.contract.request import scaled_step

SUBSET_SEED = 0  # `--n-per-class` subsets are drawn with this seed (the same images for every run)


def attack_family(attack: str) -> str:
    return attacks.family(attack)


def attack_setting(attack: str, *, eps: float, norm: str, step: float, restarts: int, cw_kappa: float,
                   tpgd_inv_temperature: float, seed: int, n_per_class: int, batch_size: int,
                   split_per_class: int = 0) -> dict[str, Any]:
    """The settings that change ``attack``'s numbers (and only those: its row of the attack table).

    ``split_per_class``: the profile's ``data.test_per_class``, when its test split is a fixed class-balanced part
    of the data set's (recorded only then, so that results on the whole split keep the setting they had)."""
    values = {"eps": float(eps), "norm": norm, "step": float(step), "restarts": int(restarts),
              "batch_size": int(batch_size), "seed": int(seed), "cw_kappa": float(cw_kappa),
              "tpgd_inv_temperature": float(tpgd_inv_temperature)}
    out: dict[str, Any] = {"n_per_class": int(n_per_class)}
    if n_per_class:
        out["subset_seed"] = SUBSET_SEED
    if split_per_class:
        out["split_per_class"] = int(split_per_class)
    row = attacks.row(attack)
    out.update((key, values[key]) for key in (row.setting if row else ("eps", "norm")))
    return out


def profile_setting(config: dict, attack: str) -> dict[str, Any]:
    """The setting of ``attack`` at a profile's own values (``config``: the resolved profile table)."""
    return requested_setting(config, attack)


def requested_setting(config: dict, attack: str, eps: float | None = None, n_per_class: int = 0,
                      batch_size: int = 0, seed: int | None = None) -> dict[str, Any]:
    """The setting `fairtui eval` gives ``attack`` for these options (None / 0: the profile's own).
    Another eps scales the step with it, as the engine does."""
    ev, atk, data = config.get("eval", {}), config.get("attack", {}), config.get("data", {})
    own_eps, own_step = ev.get("eps") or atk.get("eps", 0.0), ev.get("step") or atk.get("step", 0.0)
    eps = eps or own_eps
    return attack_setting(
        attack, eps=eps, norm=atk.get("norm", "linf"), step=scaled_step(own_step, own_eps, eps),
        restarts=ev.get("restarts", 1), cw_kappa=ev.get("cw_kappa", 50.0),
        tpgd_inv_temperature=ev.get("tpgd_inv_temperature", 5.0),
        seed=config.get("seed", 0) if seed is None else seed, n_per_class=n_per_class,
        batch_size=batch_size or data.get("eval_batch_size", 256), split_per_class=data.get("test_per_class", 0) or 0)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
    return a == b


def same_setting(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)


def recorded_matches(recorded: dict, wanted: dict) -> bool:
    """Whether a stored result's ``recorded`` setting is the ``wanted`` one. A result written before settings named
    the profile's fixed test part (``split_per_class``) was measured on that part all the same (the run's test
    split is its profile's), so the key is compared only where the result recorded it."""
    if "split_per_class" not in recorded:
        wanted = {k: v for k, v in wanted.items() if k != "split_per_class"}
    return same_setting(recorded, wanted)


def is_headline(event: dict, config: dict) -> bool:
    """True when ``event`` (an `eval_result`) was measured at the profile's own settings on the whole split."""
    setting = event.get("setting")
    if setting is None:  # written before results carried their setting: judge by what they recorded
        eps = event.get("eps")
        own = (config.get("eval", {}).get("eps") or config.get("attack", {}).get("eps"))
        return not event.get("n_per_class") and (eps is None or own is None or _same_value(float(eps), float(own)))
    return recorded_matches(setting, profile_setting(config, event.get("attack", "")))


LABELS = {"eps": "eps", "norm": "norm", "step": "step", "restarts": "restarts", "batch_size": "batch",
          "seed": "seed", "cw_kappa": "kappa", "tpgd_inv_temperature": "1/T"}


def differences(event: dict, config: dict) -> list[str]:
    """What sets ``event`` apart from a headline result, in words: ["eps 0.05 (profile 0.2)", "5 per class"]."""
    setting = event.get("setting")
    own = profile_setting(config, event.get("attack", ""))
    if setting is None:
        setting = {k: v for k, v in (("eps", event.get("eps")), ("n_per_class", event.get("n_per_class", 0)))
                   if v is not None}
    out = []
    if setting.get("n_per_class"):
        out.append(f"{setting['n_per_class']} per class")
    for key, label in LABELS.items():
        if key in setting and key in own and not _same_value(setting[key], own[key]):
            fmt = eps_text if key == "eps" else _fmt
            out.append(f"{label} {fmt(setting[key])} (profile {fmt(own[key])})")
    return out or ["settings not recorded"]


def describe(event: dict) -> str:
    """The settings that produced a result, for table titles: "eps 0.0314, whole split"."""
    setting = event.get("setting") or {}
    parts = []
    if "eps" in setting or event.get("eps") is not None:
        parts.append(f"eps {eps_text(setting.get('eps', event.get('eps')))}")
    n = setting.get("n_per_class", event.get("n_per_class", 0))
    part = setting.get("split_per_class", 0)
    split = f"test part of {part} a class" if part else "whole split"
    parts.append(f"{n} per class of the {split}" if n and part else f"{n} per class" if n else split)
    return ", ".join(parts)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def eps_text(value: Any) -> str:
    """An eps as profiles write it: "4/255" where it is a whole number of 255ths (8/255 is 0.03137...), else
    "0.2", "0.031"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        if float(f"{value:.3g}") == value:  # a short decimal as written: 0.2, 0.031
            return f"{value:.3g}"
        k = round(value * 255)
        if k and abs(value * 255 - k) < 1e-6:
            return f"{k}/255"
        return f"{value:.4g}"
    return str(value)
