"""The training loop: epochs, validation, checkpoints and events for one run folder."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine import metrics
from engine.averaging import WeightAverage
from engine.attacks.suite import AttackSettings, build_attack
from engine.checkpoint import CheckpointStore
from engine.config import Profile
from engine.data import Splits, load_splits
from engine.data.augment import plan_epoch
from engine.evaluate import per_class_result, predict
from engine.events import EventWriter
from engine.methods import Method, MethodContext, ValResult, build_method
from engine.models import build_model
from engine.progress import Progress
from engine.utils import Runtime, rng_state, seed_everything, set_rng_state

log = logging.getLogger("engine")


class StopRequested(Exception):
    """SIGINT / SIGTERM arrived: stop at the next batch boundary, keep the last checkpoint."""


class Diverged(Exception):
    """The training loss became NaN or infinite."""


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


class Trainer:
    def __init__(self, run_dir: Path, profile: Profile, runtime: Runtime, events: EventWriter,
                 progress: Progress, stop_flag: Any):
        self.run_dir, self.profile, self.rt = run_dir, profile, runtime
        self.events, self.progress, self.stop_flag = events, progress, stop_flag
        seed_everything(profile.seed)
        self.splits: Splits = load_splits(profile.data, profile.seed)
        self.k = self.splits.num_classes
        self.model = build_model(profile.model, self.splits.input_shape, self.k, self.splits.mean,
                                 self.splits.std).to(runtime.device)
        if runtime.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        # The splits live where the model does (uint8 images on the GPU on CUDA): no per-batch copy.
        self.train_data = self.splits.train.to(runtime.device)
        self.val_data = self.splits.val.to(runtime.device)
        # What the hot loop calls: the model, or the model compiled at the batch sizes it will see.
        self.step_model = runtime.step_model(self.model, (profile.data.batch_size,
                                                          profile.data.eval_batch_size))
        self.optimizer = self.new_optimizer()
        t = profile.train
        self.method: Method = build_method(MethodContext(self.k, profile, runtime.device, self.val_data))
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
        # Per-batch flags stay on the device and are counted once at the end of the epoch: the loop
        # reads nothing back from the GPU except when progress is due.
        labels: list[torch.Tensor] = []
        clean_hits: list[torch.Tensor] = []
        robust_hits: list[torch.Tensor] = []
        self.model.train()
        for b in range(batches):
            self.rt.step_begin()
            x, y = plan.batch(b, data.images, data.y)
            x = self.rt.input_format(x)
            with self.rt.autocast():
                out = self.method.loss(self.step_model, x, y)
            self.optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
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
            if self.stop_flag():
                raise StopRequested()
            if self.progress.due():
                self._check_finite(stats, epoch)
                self.progress.update("train", epoch, b + 1, batches)
        self._check_finite(stats, epoch)
        y_all = torch.cat(labels)
        if clean_hits:
            stats.clean.add(y_all, torch.cat(clean_hits))
        if robust_hits:
            stats.robust.add(y_all, torch.cat(robust_hits))
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
        clean, adv, _ = predict(self.step_model, val, self.val_attack, self.rt, self.profile.data.eval_batch_size,
                                progress)
        res = per_class_result(val.y.cpu(), clean, adv, self.k)
        return ValResult(res["clean_acc_per_class"], res["robust_acc_per_class"])

    # -- the run --------------------------------------------------------------------------------
    def start_or_resume(self) -> int:
        """Return the first epoch to train; emit run_started or run_resumed."""
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
        self.events.emit("run_resumed", epoch=epoch, device=self.rt.describe())
        if self._last_logged_epoch() < epoch:  # killed between the checkpoint and its event
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
                "provenance": provenance()}

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
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.method.start_epoch(epoch, self.last_val)
        method_state = self.method.method_state()  # what epoch t trains with
        stats = self.train_epoch(epoch)
        if self.ema is not None and epoch >= self.profile.train.ema_start_epoch:
            self.ema.update(self.model)
        val = self.validate(epoch)
        train_clean, train_robust = stats.clean.per_class(), stats.robust.per_class()
        self.method.end_epoch(epoch, self.model, train_robust, val)
        method_state.update(self.method.measurements())
        score = self.method.selection_score(val)
        is_best = score > self.best["score"]
        if is_best:
            self.best = {"score": score, "epoch": epoch}
        self.last_val = val
        event = {
            "epoch": epoch, "epochs": self.profile.train.epochs, "lr": lr, "time_s": time.time() - started,
            "train": {"loss": float(stats.loss_sum) / max(stats.n, 1),
                      "clean_acc": metrics.average(train_clean), "robust_acc": metrics.average(train_robust),
                      "clean_acc_per_class": train_clean, "robust_acc_per_class": train_robust},
            "val": {"clean_acc_per_class": val.clean_acc_per_class,
                    "robust_acc_per_class": val.robust_acc_per_class,
                    "avg_robust": metrics.average(val.robust_acc_per_class),
                    "worst_robust": metrics.worst(val.robust_acc_per_class),
                    "avg_clean": metrics.average(val.clean_acc_per_class)},
            "method_state": method_state, "best_epoch": self.best["epoch"], "is_best": is_best,
        }
        self.store.save(self._checkpoint(epoch, event), best_model=self.model.state_dict() if is_best else None,
                        best_meta=self.best)
        self.events.emit("epoch_end", **event)
        log.info("epoch %d/%d  loss %.4f  val clean %.3f  robust %.3f (worst %.3f)  %.1fs", epoch,
                 self.profile.train.epochs, event["train"]["loss"], event["val"]["avg_clean"],
                 event["val"]["avg_robust"], event["val"]["worst_robust"], event["time_s"])

    def _checkpoint(self, epoch: int, event: dict) -> dict[str, Any]:
        return {
            "epoch": epoch, "profile": self.profile.to_table(), "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "method": self.method.state_dict(),
            "ema": self.ema.state if self.ema is not None else None,
            "averaged": self.method.averaged_models(), "best": self.best, "rng": rng_state(),
            "last_val": vars(self.last_val) if self.last_val else None, "epoch_event": event,
        }
