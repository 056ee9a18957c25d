"""What the training loop records: an epoch's training counts, and the payloads of `run_started` and
`epoch_end` (the event stream of engine.contract.events), built from the loop's numbers by pure functions."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.runtime import metrics
from engine.methods import ValResult

log = logging.getLogger("engine")


@dataclass
class EpochStats:
    """One epoch's training: the loss sum and the per-class hits, summed over the ranks."""

    loss_sum: torch.Tensor
    n: int = 0
    clean: metrics.ClassCounter | None = None
    robust: metrics.ClassCounter | None = None
    samples: list[int] | None = None  # per rank

    def summary(self) -> dict[str, Any]:
        """The `train` table of an `epoch_end` event."""
        clean, robust = self.clean.per_class(), self.robust.per_class()
        return {"loss": float(self.loss_sum) / max(self.n, 1),
                "clean_acc": metrics.average(clean), "robust_acc": metrics.average(robust),
                "clean_acc_per_class": clean, "robust_acc_per_class": robust,
                "count_per_class": [int(c) for c in self.clean.total.tolist()]}


def val_summary(val: ValResult) -> dict[str, Any]:
    """The `val` table of an `epoch_end` event."""
    return {"clean_acc_per_class": val.clean_acc_per_class, "robust_acc_per_class": val.robust_acc_per_class,
            "avg_robust": metrics.average(val.robust_acc_per_class),
            "worst_robust": metrics.worst(val.robust_acc_per_class),
            "avg_clean": metrics.average(val.clean_acc_per_class)}


def run_started_payload(profile: Any, splits: Any, rt: Any, group_payload: dict[str, Any],
                        init: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `run_started` event: the resolved profile, the data's classes and split sizes, the device, the
    runtime options (``Runtime.options``), the provenance (code version, environment) and, for a fine-tune,
    ``init``: the checkpoint it starts from (``Method.start_record``)."""
    from engine.contract.config import trades_kl_form
    from engine.runtime.provenance import provenance

    sizes = splits.sizes()
    for split, counts in sizes.items():
        log.info("%s split: %d images, per class %s", split, sum(counts), counts)
    return {"config": profile.to_table(), "num_classes": splits.num_classes, "class_names": splits.class_names,
            "device": rt.describe(), "runtime": rt.options(), "seed": profile.seed, "split_sizes": sizes,
            "data_fingerprint": splits.fingerprint(),
            "trades_kl": trades_kl_form(profile),
            "provenance": provenance(),
            **({"init": init} if init else {}),
            **group_payload}


def check_same_start(method: Any, run_dir: Path) -> None:
    """A fine-tune stopped inside its first epoch starts that epoch again from ``init_from``'s checkpoint: it must
    be the file it loaded the first time (`run_started`'s ``init``, by SHA-256), or the run would continue from
    other weights than it began with. A ProfileError (exit 2, nothing lost) when the file has changed."""
    from engine.contract.events import read_events
    from engine.contract.profile_schema import ProfileError

    events, _ = read_events(run_dir / "events.jsonl")  # a run stopped in its first epoch: a few events
    started = next((e for e in events if e["type"] == "run_started"), {})
    recorded = started.get("init") or {}
    if not recorded.get("sha256"):
        return  # no fine-tune, or one started by an engine that did not record its start
    now = method.start_record().get("sha256")
    if now != recorded["sha256"]:
        what = "is gone" if now is None else (f"has changed since this run started from it (sha256 "
                                               f"{recorded['sha256'][:12]}... then, {now[:12]}... now)")
        raise ProfileError("profile", "method.init_from", f"{recorded.get('file')} {what}: the run's first epoch "
                           "cannot start again from the weights it began with; put the file back, or start a new run")


def run_resumed_payload(splits: Any) -> dict[str, Any]:
    """What a `run_resumed` event records of the session it opens: the code, machine and data that train the
    run's next epochs, which need not be those of `run_started` (a resume on another commit or CPU)."""
    from engine.runtime.provenance import provenance

    return {"data_fingerprint": splits.fingerprint(), "provenance": provenance()}
