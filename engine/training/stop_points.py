"""A stop inside an epoch: what the trainer keeps in partial.pt and how a resume takes it up again.

`Trainer` inherits these; they read its model, optimizer, EMA, method, store, group and runtime. A stop in the
training keeps the batches done so far and their counts; a stop in the validation keeps the trained epoch and
starts the validation again from the RNG states it began with. One process only: a group resumes from last.pt."""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import torch

from engine.runtime import metrics
from engine.runtime.checkpoint import CheckpointError
from engine.training.epoch_record import EpochStats
from engine.runtime.seeding import rng_state, set_rng_state

log = logging.getLogger("engine")


class StopPoints:
    def _keep_point(self, epoch: int, phase: str, done: int, batches: int, counts: dict[str, Any],
                    rng: dict | None = None) -> str:
        """A stop inside epoch ``epoch``: keep its work so far in partial.pt (engine.runtime.checkpoint), so that
        the resume continues after batch ``done`` of ``batches`` of the training (``phase`` "train") or
        starts the validation again (``phase`` "val", ``rng``: the RNG states as the validation began).
        ``counts``: the loop's training counts so far. One process only: the ranks of a group hold their
        own rows' counts and rank 0 alone writes, so a group resumes from the epoch's start (last.pt)."""
        if self.group.active or not self.store.writer:
            return f" in epoch {epoch}; the last checkpoint is kept (a group starts the epoch again)" \
                if self.group.active else ""
        self.store.save_partial({
            "epoch": epoch, "phase": phase, "batches_done": done, "batches": batches,
            "elapsed_s": time.time() - self._epoch_started, "prepare_s": self._prepare_s,
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "ema": self.ema.state if self.ema is not None else None,
            "method_batch": {k: v.detach().cpu() for k, v in self.method.batch_state().items()},
            "rng": rng if rng is not None else rng_state(), "counts": counts,
            "identity": self._partial_identity(epoch),
        })
        where = f"after batch {done} of {batches}" if phase == "train" else "in the validation"
        log.info("stopped %s of epoch %d: kept in %s; the resume continues from there", where, epoch,
                 self.store.partial_path.name)
        return f" {where} of epoch {epoch}; its work is kept: fairtui resume continues from there"

    @staticmethod
    def _batch_counts(stats: EpochStats, labels: list, clean_hits: list, robust_hits: list) -> dict[str, Any]:
        cat = lambda parts: torch.cat(parts).cpu() if parts else None  # noqa: E731
        return {"loss_sum": stats.loss_sum.detach().cpu(), "n": int(stats.n), "labels": cat(labels),
                "clean_hits": cat(clean_hits), "robust_hits": cat(robust_hits)}

    def _restore_point(self, point: dict[str, Any], stats: EpochStats, labels: list, clean_hits: list,
                       robust_hits: list) -> int:
        """Put back what :meth:`_keep_point` kept inside the training; the first batch still to train."""
        dev, counts = self.rt.device, point["counts"]
        self._restore_states(point)
        stats.loss_sum += counts["loss_sum"].to(dev)
        stats.n = counts["n"]
        for parts, key in ((labels, "labels"), (clean_hits, "clean_hits"), (robust_hits, "robust_hits")):
            if counts[key] is not None:
                parts.append(counts[key].to(dev))
        return point["batches_done"]

    def _restore_states(self, point: dict[str, Any]) -> None:
        self.model.load_state_dict(point["model"])
        self.optimizer.load_state_dict(point["optimizer"])
        if self.ema is not None and point.get("ema") is not None:
            self.ema.state = point["ema"]
        self.method.load_batch_state({k: v.to(self.rt.device) for k, v in point["method_batch"].items()})
        set_rng_state(point["rng"])

    def _trained_point(self, point: dict[str, Any]) -> EpochStats:
        """A stop in the validation: the epoch's trained model and states, and its training's counts."""
        dev, counts = self.rt.device, point["counts"]
        self._restore_states(point)
        stats = EpochStats(counts["loss_sum"].to(dev), counts["n"], clean=metrics.ClassCounter(self.k, dev),
                           robust=metrics.ClassCounter(self.k, dev), samples=counts["samples"])
        for counter, key in ((stats.clean, "clean"), (stats.robust, "robust")):
            counter.hits.copy_(counts[f"{key}_hits"])
            counter.total.copy_(counts[f"{key}_total"])
        return stats

    @staticmethod
    def _trained_counts(stats: EpochStats) -> dict[str, Any]:
        return {"loss_sum": stats.loss_sum.detach().cpu(), "n": int(stats.n), "samples": stats.samples,
                "clean_hits": stats.clean.hits.cpu(), "clean_total": stats.clean.total.cpu(),
                "robust_hits": stats.robust.hits.cpu(), "robust_total": stats.robust.total.cpu()}

    def _partial_identity(self, epoch: int) -> dict[str, Any]:
        """What a partial.pt continues: this run, its seed and resolved profile, and the last.pt it follows."""
        from engine.runtime.checkpoint import sha256_of
        from engine.contract.profile_io import dumps_profile

        last = self.store.last_path
        return {"run_id": self.run_dir.name, "seed": self.profile.seed,
                "profile_sha256": hashlib.sha256(dumps_profile(self.profile).encode()).hexdigest(),
                "last_epoch": epoch - 1, "last_sha256": sha256_of(last) if last.is_file() else None}

    def _identity_differs(self, recorded: dict[str, Any] | None, last_epoch: int) -> str | None:
        """What sets a partial.pt apart from this run (None: it is this run's; a file from before partial.pt
        recorded its identity is taken on its epoch alone, as it was then)."""
        if not isinstance(recorded, dict):
            return None
        mine = self._partial_identity(last_epoch + 1)
        names = {"run_id": "the run", "seed": "the seed", "profile_sha256": "the resolved profile",
                 "last_epoch": "the epoch of the last checkpoint it follows", "last_sha256": "the last checkpoint"}
        for key, what in names.items():
            if recorded.get(key) != mine[key]:
                return f"{what} differs ({recorded.get(key)!r} against this run's {mine[key]!r})" \
                    if key in ("run_id", "seed", "last_epoch") else f"{what} differs"
        return None

    def _set_aside(self, path: Path, why: str) -> None:
        """Keep ``path`` beside the checkpoints under another name, say so in one line, and start the epoch again
        from last.pt (as after a kill: nothing of the run is lost)."""
        aside = path.with_name(f"{path.name}.set-aside-{int(time.time())}") if self.store.writer else None
        if aside is not None:
            try:
                path.rename(aside)
            except OSError:
                path.unlink(missing_ok=True)
                aside = None
        log.warning("%s %s: set aside%s; the epoch starts again from the last checkpoint", path.name, why,
                    f" as {aside.name}" if aside is not None else "")

    def _resume_point(self, last_epoch: int) -> dict[str, Any] | None:
        """partial.pt when it continues ``last_epoch`` (the epoch of last.pt, 0: none) and this run can
        take it up; else None (and the file goes)."""
        path = self.store.partial_path
        if not path.exists() and not path.is_symlink():
            return None
        if not path.is_file():  # a FIFO, a folder or a dangling link where the file was: never opened (a FIFO hangs)
            return self._set_aside(path, "is not a plain file")
        try:
            point = self.store.load_partial(self.rt.device)
        except CheckpointError as err:  # cut, empty or damaged: the epoch starts again from last.pt, losing nothing
            return self._set_aside(path, f"cannot be read ({str(err).splitlines()[0][:160]})")
        differs = self._identity_differs(point.get("identity"), last_epoch)
        if differs:
            return self._set_aside(path, f"is not this run's: {differs}")
        if point["epoch"] != last_epoch + 1:
            log.warning("%s is of epoch %d, not the epoch after the last checkpoint (%d): not used",
                        self.store.partial_path.name, point["epoch"], last_epoch)
        elif point["epoch"] > self.profile.train.epochs:
            log.warning("%s is of epoch %d, after the run's last epoch (%d): not used",
                        self.store.partial_path.name, point["epoch"], self.profile.train.epochs)
        elif self.group.active:
            log.warning("%s was kept by one process; a run on %d processes starts epoch %d again from its "
                        "beginning", self.store.partial_path.name, self.group.world, point["epoch"])
        else:
            return point
        self.store.drop_partial()
        return None
