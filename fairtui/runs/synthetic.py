"""Synthetic run folders with realistic event streams: for tests, benchmarks and demos.

They follow the run-folder contract exactly (profile.toml, meta.json, events.jsonl)
but no engine produced them: nothing here imports torch.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from engine.contract.config import Profile
from engine.contract.profile_io import dumps_profile
from engine.contract.results import requested_setting


def _per_class(rng: random.Random, k: int, centre: float, spread: float) -> list[float]:
    return [round(min(1.0, max(0.0, rng.gauss(centre, spread))), 4) for _ in range(k)]


def _confusion(robust: list[float], n: int = 50) -> list[list[int]]:
    """A robustness confusion matrix of ``n`` images per class with these per-class accuracies: the
    misclassified images of class i go to class i + 1."""
    k = len(robust)
    rows = [[0] * k for _ in range(k)]
    for i, acc in enumerate(robust):
        rows[i][i] = round(acc * n)
        rows[i][(i + 1) % k] += n - rows[i][i]
    return rows


def make_run(home: Path, run_id: str, name: str = "synthetic", method: str = "cfa", epochs: int = 5, k: int = 10,
             seed: int = 0, status: str = "completed", profile: Profile | None = None, tags: tuple = (),
             robust_centre: float = 0.5, attacks: tuple[str, ...] = ("pgd20",), t0: float | None = None,
             method_state: dict | None = None, init_from: str = "") -> Path:
    """Write ``<home>/runs/<run_id>/`` with an event stream of ``epochs`` epochs and test results
    (``method_state``: every epoch's, instead of synthetic margins and weights; ``init_from``: a fine-tune of that
    run folder, its ``method.init_from``)."""
    rng = random.Random(f"{run_id}-{seed}")
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    if profile is None:
        profile = Profile(name=name, seed=seed)
    (run_dir / "profile.toml").write_text(dumps_profile(profile))
    table = profile.to_table()
    table["method"]["name"] = method
    if init_from:
        table["method"]["init_from"] = init_from
    t0 = t0 or time.time()
    (run_dir / "meta.json").write_text(json.dumps({"run_id": run_id, "name": name, "tags": list(tags),
                                                   "created": t0}))
    events = [{"type": "run_started", "config": table, "num_classes": k,
               "class_names": [f"c{i}" for i in range(k)], "device": "cpu", "seed": seed}]
    for epoch in range(1, epochs + 1):
        centre = robust_centre * epoch / epochs
        events.append({"type": "epoch_end", "epoch": epoch, "epochs": epochs, "lr": 0.1, "time_s": 1.0,
                       "train": {"loss": 1.0 / epoch, "clean_acc": 0.8, "robust_acc": centre,
                                 "clean_acc_per_class": _per_class(rng, k, 0.8, 0.05),
                                 "robust_acc_per_class": _per_class(rng, k, centre, 0.1)},
                       "val": {"clean_acc_per_class": _per_class(rng, k, 0.8, 0.05),
                               "robust_acc_per_class": _per_class(rng, k, centre, 0.15)},
                       "method_state": method_state if method_state is not None else
                       {"eps_per_class": _per_class(rng, k, 0.03, 0.005), "class_weights": _per_class(rng, k, 0.1, 0.01)}})
    if status in ("completed",):
        for ckpt in ("last", "best"):
            for attack in attacks:
                clean = _per_class(rng, k, 0.85, 0.05)
                robust = _per_class(rng, k, robust_centre, 0.15)
                events.append({"type": "eval_result", "split": "test", "checkpoint": ckpt, "epoch": epochs,
                               "attack": attack, "eps": table["eval"].get("eps") or table["attack"]["eps"],
                               "n_per_class": 0, "setting": requested_setting(table, attack),
                               "clean_acc_per_class": clean, "robust_acc_per_class": robust,
                               "avg_clean": sum(clean) / k, "avg_robust": sum(robust) / k,
                               "worst_robust": min(robust), "cv": 0.0, "mcd": max(robust) - min(robust),
                               "confusion_matrix": _confusion(robust)})
    if status in ("completed", "failed", "stopped"):
        events.append({"type": "run_finished", "status": status,
                       **({"error": "synthetic failure"} if status == "failed" else {})})
    with open(run_dir / "events.jsonl", "w") as fh:
        for seq, e in enumerate(events):
            fh.write(json.dumps({"v": 1, "seq": seq, "t": t0 + seq, "run_id": run_id, **e}) + "\n")
    return run_dir


