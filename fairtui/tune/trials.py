"""A tuning study's trials as runs and as text (fairtui.tune.study's driver): how a trial's run is marked when its driver
stops it, which ends of a run are the machine's and not the trial's, and how an objective and parameters are shown."""

from __future__ import annotations

import json
import re
from pathlib import Path


def objective_text(value: float | None) -> str:
    """An objective as every view shows it: in % (the accuracies it is made of), one decimal; a shortfall under
    an average floor is negative."""
    return "-" if value is None else f"{100 * value:.1f}%"


def shown_params(params: dict) -> str:
    """A trial's parameters for a person: four significant digits."""
    return "{" + ", ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}" for k, v in params.items()) + "}"


DRIVER_STOPPED = "stopped_by_study"  # meta.json: the run was stopped with its study's driver, not by hand


def unmark_stopped(run_dir: Path) -> None:
    from fairtui.launch.launcher import change_meta

    try:
        marked = DRIVER_STOPPED in json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError):
        marked = False
    if marked:
        change_meta(run_dir, lambda m: m.pop(DRIVER_STOPPED, None))


def machine_reason(view, status: str) -> str | None:
    """Why a trial's run ended for the machine's reasons and not its own, or None: its engine died with no
    end recorded (``lost``: the kernel's OOM killer, a kill -9 from outside fairtui, a reboot), or it failed
    on a full disk. Such a trial is resumed by `tune --resume`, not counted as a failure of its parameters."""
    if status == "lost":
        return "its engine died with no end recorded"
    error = str((view.finished or {}).get("error", ""))
    if status == "failed" and ("No space left on device" in error or re.search(r"the disk holding .* is full", error)):
        return "the disk is full"
    return None


def summary(study, req) -> dict:
    """The trials table, the best trial so far and the parameters' importance (Optuna's; None until it can be
    computed)."""
    import optuna as opt  # installed: the study was read with it
    rows = []
    for t in study.get_trials(deepcopy=False):
        held = t.user_attrs.get("held") if t.state.name == "RUNNING" else None  # kept for --resume, not counted
        rows.append({"trial": t.number, "state": "held" if held else t.state.name.lower(), "value": t.value,
                     "params": t.params, "run_id": t.user_attrs.get("run_id"), **({"held": held} if held else {})})
    try:
        best = study.best_trial
        best_row = {"trial": best.number, "value": best.value, "params": best.params,
                    "run_id": best.user_attrs.get("run_id")}
    except ValueError:
        best_row = None
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "importances will be equal" while trials tie
            importance = dict(opt.importance.get_param_importances(study)) if len(req.space) > 1 else None
    except (RuntimeError, ValueError, ZeroDivisionError):
        importance = None
    pruning = (f"median from epoch {req.prune_after}, after {req.prune_startup} finished trials"
               if req.pruner == "median" else req.pruner)
    return {"study": req.study, "profile_path": req.profile_path, "objective": req.objective.label(),
            "pruner": pruning, "budget": req.trials, "space": {d.key: d.spec() for d in req.space}, "trials": rows,
            "best": best_row, "importance": importance, "finished": study.user_attrs.get("finished")}
