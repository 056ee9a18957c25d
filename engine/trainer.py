"""The training loop: epochs, validation, checkpoints and events for one run folder."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine import metrics
from engine.attacks import noise
from engine.attacks.suite import AttackSettings, build_attack
from engine.averaging import WeightAverage
from engine.checkpoint import CheckpointStore
from engine.config import Profile
from engine.data import Splits, load_splits
from engine.data.augment import plan_epoch
from engine.distributed import Group, convert_sync_bn, has_batchnorm, wrap_ddp
from engine.evaluate import per_class_result, predict
from engine.events import EventWriter
from engine.process import Diverged, StopRequested
from engine.methods import Method, MethodContext, ValResult, build_method
from engine.models import build_model
from engine.progress import Progress
from engine.utils import Runtime, rng_state, seed_everything, set_rng_state

log = logging.getLogger("engine")


def lr_at(epoch: int, profile: Profile) -> float:
    """The learning rate of epoch ``epoch`` (1-based): a pure function, so a resume needs no state."""
    t = profile.train
    if t.schedule == "piecewise":
        return t.lr * t.gamma ** sum(epoch > m for m in t.milestones)
    if t.schedule == "cosine":
        return t.lr * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / t.epochs))
    return t.lr


@dataclass
class EpochStats:
    loss_sum: torch.Tensor
    n: int = 0
    clean: metrics.ClassCounter | None = None
    robust: metrics.ClassCounter | None = None
    samples: list[int] | None = None  # per rank


class NoEvents:
    """What ranks other than 0 write to the event stream: nothing (rank 0 alone writes the run folder)."""

    def emit(self, type_: str, **payload: Any) -> dict:
        return {}

    def close(self) -> None:
        pass


class NoProgress:
    def due(self) -> bool:
        return False

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


class Trainer:
    def __init__(self, run_dir: Path, profile: Profile, runtime: Runtime, events: EventWriter,
                 progress: Progress, stop_flag: Any, group: Group | None = None):
        self.run_dir, self.profile, self.rt = run_dir, profile, runtime
        self.group = group or Group()
        if not self.group.is_main:
            events, progress = NoEvents(), NoProgress()  # type: ignore[assignment]
        self.events, self.progress, self.stop_flag = events, progress, stop_flag
        seed_everything(profile.seed)  # the same on every rank: the same initial weights and RNG streams
        self.splits: Splits = load_splits(profile.data, profile.seed)
        self.k = self.splits.num_classes
        self.model = build_model(profile.model, self.splits.input_shape, self.k, self.splits.mean,
                                 self.splits.std).to(runtime.device)
        self.sync_bn = profile.train.sync_bn and self.group.active and has_batchnorm(self.model)
        if self.sync_bn:
            self.model = convert_sync_bn(self.model, runtime.device)
        if runtime.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        # The splits live where the model does (uint8 images on the GPU on CUDA): no per-batch copy.
        self.train_data = self.splits.train.to(runtime.device)
        self.val_data = self.splits.val.to(runtime.device)
        # What the hot loop calls: the model, or the model compiled at the batch sizes it will see
        # (a rank's share of them in a multi-process run).
        sizes = (profile.data.batch_size, profile.data.eval_batch_size)
        self.step_model = runtime.step_model(self.model, tuple(max(self.group.shard_sizes(b)) for b in sizes))
        # What the loss forwards go through: DDP in a multi-process run (attacks still call step_model).
        self.loss_model = wrap_ddp(self.model, self.step_model, runtime.device) if self.group.active \
            else self.step_model
        self.optimizer = self.new_optimizer()
        t = profile.train
        self.method: Method = build_method(MethodContext(self.k, profile, runtime.device, self.val_data,
                                                         group=self.group))
        self.ema = WeightAverage(t.ema_decay) if t.ema_decay > 0 else None
        self.store = CheckpointStore(run_dir / "checkpoints")
        self.best: dict[str, Any] = {"score": -math.inf, "epoch": 0}
        self.val_attack = build_attack(profile.eval.val_attack, self.step_model, self.attack_settings())
        self.last_val: ValResult | None = None

    def new_optimizer(self) -> torch.optim.Optimizer:
        t = self.profile.train
        return torch.optim.SGD(self.model.parameters(), lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay,
                               nesterov=t.nesterov)

    def attack_settings(self) -> AttackSettings:
        e = self.profile.eval
        return AttackSettings(eps=e.eps, step=e.step, norm=self.profile.attack.norm, cw_kappa=e.cw_kappa,
                              tpgd_inv_temperature=e.tpgd_inv_temperature, restarts=e.restarts,
                              seed=self.profile.seed)

    # -- one epoch ------------------------------------------------------------------------------
    def train_epoch(self, epoch: int) -> EpochStats:
        data, dev = self.train_data, self.rt.device
        # The order and every crop and flip of the epoch, drawn on the CPU and moved once.
        plan = plan_epoch(len(data), self.profile.data.batch_size, tuple(data.x.shape[1:]), self.splits.augment,
                          self.profile.seed, epoch).to(dev)
        stats = EpochStats(torch.zeros((), dtype=torch.float64, device=dev),
                           clean=metrics.ClassCounter(self.k, dev), robust=metrics.ClassCounter(self.k, dev))
        batches = plan.batches
        group = self.group
        if group.active and len(data) - (batches - 1) * plan.batch_size < group.world:
            batches -= 1  # a last global batch smaller than the group would leave a rank without samples
            log.warning("epoch %d: the last %d samples are left out (fewer than the %d ranks)", epoch,
                        len(data) - batches * plan.batch_size, group.world)
        # Per-batch flags stay on the device and are counted once at the end of the epoch: the loop
        # reads nothing back from the GPU except when progress is due.
        labels: list[torch.Tensor] = []
        clean_hits: list[torch.Tensor] = []
        robust_hits: list[torch.Tensor] = []
        self.model.train()
        for b in range(batches):
            self.rt.step_begin()
            n = min(plan.batch_size, len(data) - b * plan.batch_size)
            lo, hi = group.shard(n)
            x, y = plan.batch(b, data.images, data.y, rows=(lo, hi))
            x = self.rt.input_format(x)
            with self.rt.autocast(), noise.sharded(lo, hi, n) if group.active else contextlib.nullcontext():
                out = self.method.loss(self.loss_model, x, y)
            self.optimizer.zero_grad(set_to_none=True)
            # DDP averages the ranks' gradients; weighting each rank's mean by its share of the batch
            # makes that average the gradient of the global batch mean, shards of any size.
            (out.loss * ((hi - lo) * group.world / n) if group.active else out.loss).backward()
            self.optimizer.step()
            if out.clean_after_step:
                with torch.no_grad(), self.rt.autocast():
                    out.logits_clean = self.step_model(x)
            stats.loss_sum += out.loss.detach() * len(y)
            stats.n += len(y)
            labels.append(y)
            if out.logits_clean is not None:
                clean_hits.append(out.logits_clean.argmax(1) == y)
            if out.logits_adv is not None:
                robust_hits.append(out.logits_adv.argmax(1) == y)
            # Every rank stops at the same batch: a host-side all-reduce of the stop flags.
            if group.any(self.stop_flag()):
                raise StopRequested()
            if self.progress.due():
                self._check_finite(stats, epoch)
                self.progress.update("train", epoch, b + 1, batches)
        y_all = torch.cat(labels)
        if clean_hits:
            stats.clean.add(y_all, torch.cat(clean_hits))
        if robust_hits:
            stats.robust.add(y_all, torch.cat(robust_hits))
        stats.samples = [stats.n]
        if group.active:
            local = torch.tensor([float(stats.n)], dtype=torch.float64)
            stats.samples = [int(t.item()) for t in group.gather_host(local)]
            group.sum_(stats.loss_sum, stats.clean.hits, stats.clean.total, stats.robust.hits, stats.robust.total)
            stats.n = sum(stats.samples)
        self._check_finite(stats, epoch)
        return stats

    def _check_finite(self, stats: EpochStats, epoch: int) -> None:
        if not math.isfinite(float(stats.loss_sum)):
            raise Diverged(f"the training loss became {float(stats.loss_sum)} in epoch {epoch}")

    def validate(self, epoch: int) -> ValResult:
        def progress(b: int, n: int) -> None:
            if self.stop_flag():
                raise StopRequested()
            if self.progress.due():
                self.progress.update("val", epoch, b, n)

        val = self.val_data
        if self.group.active:
            return self._validate_sharded(epoch)
        clean, adv, _ = predict(self.step_model, val, self.val_attack, self.rt, self.profile.data.eval_batch_size,
                                progress)
        res = per_class_result(val.y.cpu(), clean, adv, self.k)
        return ValResult(res["clean_acc_per_class"], res["robust_acc_per_class"])

    def _validate_sharded(self, epoch: int) -> ValResult:
        """This rank's shard of every validation batch; the per-class counts of all ranks summed.
        A stop request waits for the lockstep check after the pass (the ranks must stop together)."""
        from engine.data import TensorData

        val, bs = self.val_data, self.profile.data.eval_batch_size
        y_parts, clean_parts, adv_parts = [], [], []
        for b, start in enumerate(range(0, len(val), bs)):
            n = min(bs, len(val) - start)
            lo, hi = self.group.shard(n)
            with noise.sharded(lo, hi, n):
                clean, adv, _ = predict(self.step_model, TensorData(val.x[start + lo:start + hi], val.y[start + lo:start + hi]),
                                        self.val_attack,
                                        self.rt, bs)
            y_parts.append(val.y[start + lo:start + hi].cpu())
            clean_parts.append(clean)
            adv_parts.append(adv)
            if self.progress.due():
                self.progress.update("val", epoch, b + 1, (len(val) + bs - 1) // bs)
        y = torch.cat(y_parts)
        clean_c, robust_c = metrics.ClassCounter(self.k), metrics.ClassCounter(self.k)
        clean_c.add(y, torch.cat(clean_parts) == y)
        robust_c.add(y, torch.cat(adv_parts) == y)
        self.group.sum_(clean_c.hits, clean_c.total, robust_c.hits, robust_c.total)
        return ValResult(clean_c.per_class(), robust_c.per_class())

    # -- the run --------------------------------------------------------------------------------
    def start_or_resume(self) -> int:
        """Return the first epoch to train; emit run_started or run_resumed."""
        if self.group.is_main and (removed := self.store.remove_leftovers()):
            log.info("removed %d temporary checkpoint file(s) left by an interrupted write", removed)
        state = self.store.load_last(self.rt.device)
        if state is None:
            self.events.emit("run_started", **self.run_started_payload())
            self.method.initialize(self.model)
            return 1
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.method.load_state_dict(state["method"])
        if self.ema is not None and state.get("ema") is not None:
            self.ema.state = state["ema"]
        self.best = state["best"]
        self.last_val = ValResult(**state["last_val"]) if state.get("last_val") else None
        set_rng_state(state["rng"])
        epoch = state["epoch"]
        self.events.emit("run_resumed", epoch=epoch, device=self.rt.describe(), **self._group_payload())
        if self.group.is_main and self._last_logged_epoch() < epoch:  # killed between the checkpoint and its event
            self.events.emit("epoch_end", **state["epoch_event"])
        log.info("resumed after epoch %d", epoch)
        return epoch + 1

    def _last_logged_epoch(self) -> int:
        from engine.events import read_events

        events, _ = read_events(self.events.path)
        ends = [e["epoch"] for e in events if e.get("type") == "epoch_end"]
        return max(ends, default=0)

    def run_started_payload(self) -> dict[str, Any]:
        from engine.provenance import provenance

        sizes = self.splits.sizes()
        for split, counts in sizes.items():
            log.info("%s split: %d images, per class %s", split, sum(counts), counts)
        return {"config": self.profile.to_table(), "num_classes": self.k, "class_names": self.splits.class_names,
                "device": self.rt.describe(), "seed": self.profile.seed, "split_sizes": sizes,
                "provenance": provenance(), **self._group_payload()}

    def _group_payload(self) -> dict[str, Any]:
        """The process group of a multi-process run (nothing for one process)."""
        if not self.group.active:
            return {}
        return {"distributed": {**self.group.describe(), "sync_bn": self.sync_bn,
                                "global_batch_size": self.profile.data.batch_size,
                                "batch_per_rank": self.group.shard_sizes(self.profile.data.batch_size)}}

    def fit(self) -> None:
        first = self.start_or_resume()
        epochs = self.profile.train.epochs
        if first == 1 and self.method.needs_initial_val:
            self.last_val = self.validate(0)
        for epoch in range(first, epochs + 1):
            self.run_epoch(epoch)
        self.progress.update("done", epochs, 0, 0)

    def run_epoch(self, epoch: int) -> None:
        started = time.time()
        if self.method.fresh_optimizer(epoch):
            self.optimizer = self.new_optimizer()
        lr = self.method.lr_for(epoch, lr_at(epoch, self.profile))
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr
        self.method.start_epoch(epoch, self.last_val)
        method_state = self.method.method_state()  # what epoch t trains with
        stats = self.train_epoch(epoch)
        self.group.broadcast_buffers(self.model)  # rank 0's BatchNorm statistics: one model on all ranks
        if self.ema is not None and epoch >= self.profile.train.ema_start_epoch:
            self.ema.update(self.model)
        val = self.validate(epoch)
        train_clean, train_robust = stats.clean.per_class(), stats.robust.per_class()
        self.method.end_epoch(epoch, self.model, train_robust, val)
        method_state.update(self.method.measurements())
        distributed = self._check_ranks(epoch, stats) if self.group.active else None
        score = self.method.selection_score(val)
        is_best = self.method.selectable(epoch) and score > self.best["score"]
        if is_best:
            self.best = {"score": score, "epoch": epoch}
        self.last_val = val
        event = {
            "epoch": epoch, "epochs": self.profile.train.epochs, "lr": lr, "time_s": time.time() - started,
            "train": {"loss": float(stats.loss_sum) / max(stats.n, 1),
                      "clean_acc": metrics.average(train_clean), "robust_acc": metrics.average(train_robust),
                      "clean_acc_per_class": train_clean, "robust_acc_per_class": train_robust,
                      "count_per_class": [int(c) for c in stats.clean.total.tolist()]},
            "val": {"clean_acc_per_class": val.clean_acc_per_class,
                    "robust_acc_per_class": val.robust_acc_per_class,
                    "avg_robust": metrics.average(val.robust_acc_per_class),
                    "worst_robust": metrics.worst(val.robust_acc_per_class),
                    "avg_clean": metrics.average(val.clean_acc_per_class)},
            "method_state": method_state, "best_epoch": self.best["epoch"], "is_best": is_best,
        }
        if distributed is not None:
            event["distributed"] = distributed
        if self.group.is_main:
            self.store.save(self._checkpoint(epoch, event), best_model=self.model.state_dict() if is_best else None,
                            best_meta=self.best)
        self.events.emit("epoch_end", **event)
        log.info("epoch %d/%d  loss %.4f  val clean %.3f  robust %.3f (worst %.3f)  %.1fs", epoch,
                 self.profile.train.epochs, event["train"]["loss"], event["val"]["avg_clean"],
                 event["val"]["avg_robust"], event["val"]["worst_robust"], event["time_s"])

    def _check_ranks(self, epoch: int, stats: EpochStats) -> dict[str, Any]:
        """Check that every rank holds the same weights and the same class-wise state after ``epoch``
        (RankMismatch otherwise: the run fails rather than report one rank's numbers). What the
        epoch event records: the group, each rank's samples, and each rank's state digest."""
        import hashlib

        def digest(prints: list[float]) -> str:
            return hashlib.sha256(torch.tensor(prints, dtype=torch.float64).numpy().tobytes()).hexdigest()[:16]

        model = self.group.check_identical({"model": self.model.state_dict(),
                                            "ema": self.ema.state if self.ema is not None else None},
                                           f"the weights after epoch {epoch}")
        method = self.group.check_identical({"method": self.method.state_dict(), "best": self.best["score"]},
                                            f"the {self.method.name} state after epoch {epoch}")
        return {**self.group.describe(), "sync_bn": self.sync_bn, "samples_per_rank": stats.samples,
                "model_digest_per_rank": [digest(p) for p in model],
                "method_digest_per_rank": [digest(p) for p in method]}

    def _checkpoint(self, epoch: int, event: dict) -> dict[str, Any]:
        return {
            "epoch": epoch, "profile": self.profile.to_table(), "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "method": self.method.state_dict(),
            "ema": self.ema.state if self.ema is not None else None,
            "averaged": self.method.averaged_models(), "best": self.best, "rng": rng_state(),
            "last_val": vars(self.last_val) if self.last_val else None, "epoch_event": event,
        }
