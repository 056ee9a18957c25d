"""What makes two groups' numbers comparable: the protocol of a run. Two parts:

- the **measurement** (data set, headline attack, its eps, the split, the fixed test part, the subset): numbers
  measured differently are never paired;
- the **training budget** (epochs and lr schedule, training set size, model and width, batch size, training attack:
  norm, steps, eps, step size): groups that differ there are paired only when the user asks
  (``--allow-protocol-difference``), and then every output names each difference. A fine-tune's epochs and
  schedule are its method's own (it continues a run that had the base's): they are compared between two fine-tunes,
  not between a fine-tune and its base.

Each key is the profile key a user would ``--set`` (``train.epochs``), so a refusal names what to change."""

from __future__ import annotations

from typing import Any

from fairtui.runs.runfolder import RunView

MEASUREMENT = ("dataset", "attack", "eps", "split", "test part (images a class)", "n_per_class")
SCHEDULE_KEYS = ("train.epochs", "train.lr schedule")


def measurement(view: RunView, result: dict) -> dict[str, Any]:
    data = view.config.get("data", {})
    setting = result.get("setting") or {}
    eps = setting.get("eps", result.get("eps"))
    return {"dataset": data.get("dataset"), "attack": result.get("attack"),
            "eps": None if eps is None else round(float(eps), 6), "split": result.get("split"),
            "test part (images a class)": data.get("test_per_class") or "whole split",
            "n_per_class": setting.get("n_per_class", result.get("n_per_class", 0))}


def budget(view: RunView) -> dict[str, Any]:
    """The training budget of a run, by profile key (the run's resolved profile; milestones as epochs; the training
    set as the images it trained on)."""
    return budget_of(view.config, (view.started or {}).get("split_sizes", {}).get("train"))


def budget_of(cfg: dict, sizes: list[int] | None = None) -> dict[str, Any]:
    """The training budget of a resolved profile table (``sizes``: the training split's class sizes, where a run
    recorded them; else the profile's ``data.train_per_class``)."""
    data, model, train, attack = (cfg.get(k) or {} for k in ("data", "model", "train", "attack"))
    return {"data.train_per_class": sum(sizes) if sizes else data.get("train_per_class"),
            "model.arch": f"{model.get('arch')} (base width {model.get('base_width', 'default')})",
            "data.batch_size": data.get("batch_size"),
            "train.epochs": train.get("epochs"),
            "train.lr schedule": schedule_text(train),
            "attack.norm": attack.get("norm", "linf"), "attack.steps": attack.get("steps"),
            "attack.eps": _round(attack.get("eps")), "attack.step": _round(attack.get("step"))}


def schedule_text(train: dict) -> str:
    """"lr 0.025, piecewise x0.1 after epochs 12, 14"; relative milestones ("75%", "-10") as the epochs they resolve
    to (the engine's rule: engine.contract.config.milestone_epoch)."""
    from engine.contract.config import milestone_epoch

    epochs, kind = train.get("epochs") or 0, train.get("schedule", "piecewise")
    text = f"lr {train.get('lr')}, {kind}"
    if kind == "piecewise":
        ms = [milestone_epoch(m, epochs) for m in train.get("milestones") or []]
        text += f" x{train.get('gamma', 0.1)} after epoch{'s' if len(ms) != 1 else ''} {', '.join(map(str, ms))}" if ms \
            else " (no milestones)"
    return text


def _shown(key: str, value: Any) -> Any:
    """A value as a refusal line shows it: an eps or step as profiles write it ("4/255", "0.007"; the values here
    are rounded to 6 decimals, so a 255th is recognised to 1e-3 of one), anything else as it is (#88)."""
    if ("eps" in key or "step" in key) and "steps" not in key and isinstance(value, (int, float)) \
            and not isinstance(value, bool) and value > 0:
        if float(f"{value:.3g}") == value:
            return f"{value:.3g}"
        k = round(value * 255)
        if k and abs(value * 255 - k) < 1e-3:
            return f"{k}/255"
    return value


def _round(x) -> Any:
    try:
        return round(float(x), 6)
    except (TypeError, ValueError):
        return x


def protocol(view: RunView, result: dict) -> dict[str, Any]:
    """The run's protocol, measurement and training budget, in one dict (what `compare --json` shows of a group)."""
    return {**measurement(view, result), **budget(view)}


def is_fine_tune(view: RunView) -> bool:
    return bool((view.config.get("method") or {}).get("init_from"))


def differences(a: RunView, ra: dict, b: RunView, rb: dict) -> tuple[str | None, list[str]]:
    """How two runs' protocols differ: the first measurement difference (never paired) or None, and one line per
    training-budget difference ("train.epochs differs (5 against 30)")."""
    ma, mb = measurement(a, ra), measurement(b, rb)
    for key in ma:
        if ma[key] != mb[key]:
            return f"{key} differs ({_shown(key, ma[key])} against {_shown(key, mb[key])})", []
    ba, bb = budget(a), budget(b)
    skip = SCHEDULE_KEYS if is_fine_tune(a) != is_fine_tune(b) else ()
    return None, [f"{key} differs ({_shown(key, ba[key])} against {_shown(key, bb[key])})" for key in ba
                  if key not in skip and ba[key] != bb[key]]


def planned_differences(method: dict, baseline: dict) -> list[str]:
    """Before anything trains (`fairtui judge`): how a method's resolved profile table and its baseline's differ in
    what they measure (data set, headline attack and eps, fixed test part) and in the training budget, one line
    each; the method's runs would not be paired with the baseline's. A fine-tune's own schedule is not compared."""
    def measured(cfg: dict) -> dict[str, Any]:
        data, ev, attack = (cfg.get(k) or {} for k in ("data", "eval", "attack"))
        eps = ev.get("eps") or attack.get("eps")
        return {"data.dataset": data.get("dataset"), "eval.attacks": (ev.get("attacks") or ["?"])[0],
                "eval.eps": _round(eps), "data.test_per_class": data.get("test_per_class") or "whole split"}

    out = []
    for a, b in ((measured(method), measured(baseline)), (budget_of(method), budget_of(baseline))):
        out += [f"{key} differs ({_shown(key, a[key])} against {_shown(key, b[key])})" for key in a if a[key] != b[key]]
    fine = [bool((cfg.get("method") or {}).get("init_from")) for cfg in (method, baseline)]
    skip = SCHEDULE_KEYS if fine[0] != fine[1] else ()
    return [line for line in out if line.split(" differs")[0] not in skip]
