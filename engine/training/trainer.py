"""The training loop: epochs, validation, checkpoints and events for one run folder."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from engine.runtime import metrics
from engine.attacks.noise import Draws
from engine.attacks.suite import AttackSettings, build_attack
from engine.runtime.averaging import WeightAverage
from engine.runtime.checkpoint import CheckpointStore
from engine.contract.config import Profile
from engine.data import Splits, TensorData, load_splits
from engine.data.augment import plan_epoch
from engine.training.distributed import Group
from engine.training.epoch_record import EpochStats, check_same_start, run_resumed_payload, run_started_payload, val_summary
from engine.evaluation.evaluate import predict
from engine.contract.events import EventWriter
from engine.contract.protocol import resumed_text
from engine.training.process import Diverged, StopRequested
from engine.methods import Method, MethodContext, ValResult, build_method
from engine.models import build_model
from engine.training.optim import new_sgd
from engine.contract.mechanisms import scheduled_lr as lr_at  # the profile's schedule, torch-free
from engine.runtime.progress import Progress
from engine.training.stop_points import StopPoints
from engine.runtime.device import Runtime
from engine.runtime.seeding import rng_state, seed_everything, set_rng_state

log = logging.getLogger("engine")


class Trainer(StopPoints):
    """One run's training, in one process or as one rank of a group. What differs between the two is
    decided once, by :class:`Group`: the batch rows this process takes and their attack draws, the loss
    weight, the reductions, the model the loss runs through (DDP in a group) and what it writes (rank 0
    alone writes the run folder). The loop itself has no rank branches."""

    def __init__(self, run_dir: Path, profile: Profile, runtime: Runtime, events: EventWriter,
                 progress: Progress, stop_flag: Any, group: Group | None = None):
        self.run_dir, self.profile, self.rt = run_dir, profile, runtime
        self.group = group or Group()
        self.events, self.progress = events, progress  # a rank other than 0's write nothing (Group.writers)
        self.stop_flag = stop_flag
        seed_everything(profile.seed)  # the same on every rank: the same initial weights and RNG streams
        self.splits: Splits = load_splits(profile.data, profile.seed)
        self.k = self.splits.num_classes
        model = build_model(profile.model, self.splits.input_shape, self.k, self.splits.mean,
                            self.splits.std).to(runtime.device)
        self.model, self.sync_bn = self.group.prepare_model(model, runtime.device, profile.train.sync_bn)
        if runtime.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        # The splits live where the model does (uint8 images on the GPU on CUDA): no per-batch copy.
        self.train_data = self.splits.train.to(runtime.device)
        self.val_data = self.splits.val.to(runtime.device)
        # Two views of the one model: what attacks and gradient-free forwards run (the model, or compiled
        # at the batch sizes this process sees), and what the loss forwards run (DDP over it in a group).
        sizes = (profile.data.batch_size, profile.data.eval_batch_size)
        self.attack_model = runtime.step_model(self.model, tuple(max(self.group.shard_sizes(b)) for b in sizes))
        self.train_model = self.group.training_view(self.model, self.attack_model, runtime.device)
        self.optimizer = self.new_optimizer()
        t = profile.train
        self.method: Method = build_method(MethodContext(self.k, profile, runtime.device, self.val_data,
                                                         group=self.group, attack_model=self.attack_model,
                                                         class_names=self.splits.class_names,
                                                         splits=self.splits))
        self.ema = WeightAverage(t.ema_decay) if t.ema_decay > 0 else None
        self.store = CheckpointStore(run_dir / "checkpoints", writer=self.group.is_main)
        self.best: dict[str, Any] = {"score": -math.inf, "epoch": 0}
        self.val_attack = build_attack(profile.eval.val_attack, self.attack_model, self.attack_settings())
        self.last_val: ValResult | None = None
        # A stop's mid-epoch state (engine.runtime.checkpoint's partial.pt), taken up by the epoch it belongs to.
        self.resume_point: dict[str, Any] | None = None
        self._epoch_started, self._prepare_s, self._train_batches = time.time(), 0.0, 0

    def new_optimizer(self) -> Any:
        """SGD: torch.optim's on a GPU, engine.training.optim's (the same arithmetic, without torch._dynamo) on the CPU."""
        t = self.profile.train
        return new_sgd(self.model.parameters(), self.rt.device, lr=t.lr, momentum=t.momentum,
                       weight_decay=t.weight_decay, nesterov=t.nesterov)

    def attack_settings(self) -> AttackSettings:
        e = self.profile.eval
        return AttackSettings(eps=e.eps, step=e.step, norm=self.profile.attack.norm, cw_kappa=e.cw_kappa,
                              tpgd_inv_temperature=e.tpgd_inv_temperature, restarts=e.restarts,
                              seed=self.profile.seed)

    # -- one epoch ------------------------------------------------------------------------------
    def epoch_batches(self, epoch: int, phase: str) -> Iterator[tuple[torch.Tensor, torch.Tensor, Draws]]:
        """The epoch's training batches (its order and every crop and flip, as train_epoch takes them), this
        rank's rows with their attack draws; every rank stops at the same batch; progress as ``phase``."""
        data, group = self.train_data, self.group
        plan = plan_epoch(len(data), self.profile.data.batch_size, tuple(data.x.shape[1:]), self.splits.augment,
                          self.profile.seed, epoch).to(self.rt.device)
        batches = group.usable_batches(len(data), plan.batch_size, plan.batches)
        for b in range(batches):
            draws = group.draws(min(plan.batch_size, len(data) - b * plan.batch_size))
            x, y = plan.batch(b, data.images, data.y, rows=(draws.lo, draws.hi))
            yield self.rt.input_format(x), y, draws
            if group.any(self.stop_flag()):
                raise StopRequested()
            if self.progress.due():
                self.progress.update(phase, epoch, b + 1, batches)

    def train_epoch(self, epoch: int, point: dict[str, Any] | None = None) -> EpochStats:
        """Train epoch ``epoch``; from ``point`` (a stop's partial.pt of this epoch) on: its model,
        optimiser, RNG states, the method's sums and the loop's counts, continuing after its batch."""
        data, dev, group = self.train_data, self.rt.device, self.group
        # The order and every crop and flip of the epoch, drawn on the CPU and moved once.
        plan = plan_epoch(len(data), self.profile.data.batch_size, tuple(data.x.shape[1:]), self.splits.augment,
                          self.profile.seed, epoch).to(dev)
        stats = EpochStats(torch.zeros((), dtype=torch.float64, device=dev),
                           clean=metrics.ClassCounter(self.k, dev), robust=metrics.ClassCounter(self.k, dev))
        batches = self._train_batches = group.usable_batches(len(data), plan.batch_size, plan.batches)
        if batches < plan.batches:
            log.warning("epoch %d: the last %d samples are left out (fewer than the %d ranks)", epoch,
                        len(data) - batches * plan.batch_size, group.world)
        # Per-batch flags stay on the device and are counted once at the end of the epoch: the loop
        # reads nothing back from the GPU except when progress is due.
        labels: list[torch.Tensor] = []
        clean_hits: list[torch.Tensor] = []
        robust_hits: list[torch.Tensor] = []
        first = 0
        if point is not None:
            first = self._restore_point(point, stats, labels, clean_hits, robust_hits)
        self.model.train()
        for b in range(first, batches):
            self.rt.step_begin()
            draws = group.draws(min(plan.batch_size, len(data) - b * plan.batch_size))
            x, y = plan.batch(b, data.images, data.y, rows=(draws.lo, draws.hi))
            x = self.rt.input_format(x)
            with self.rt.autocast():
                out = self.method.loss(self.train_model, x, y, draws)
            self.optimizer.zero_grad(set_to_none=True)
            group.scale_loss(out.loss, draws).backward()
            self.optimizer.step()
            if out.clean_after_step:
                with torch.no_grad(), self.rt.autocast():
                    out.logits_clean = self.attack_model(x)
            stats.loss_sum += out.loss.detach() * len(y)
            stats.n += len(y)
            labels.append(y)
            if out.logits_clean is not None:
                clean_hits.append(out.logits_clean.argmax(1) == y)
            if out.logits_adv is not None:
                robust_hits.append(out.logits_adv.argmax(1) == y)
            # Every rank stops at the same batch: a host-side all-reduce of the stop flags.
            if group.any(self.stop_flag()):
                kept = self._keep_point(epoch, "train", b + 1, batches,
                                        self._batch_counts(stats, labels, clean_hits, robust_hits))
                raise StopRequested(kept)
            if self.progress.due():
                self._check_finite(stats, epoch)
                # first_batch: where this session began the epoch (a resumed one: after its kept batches), so a
                # reader's ETA counts only the batches trained at this session's rate
                self.progress.update("train", epoch, b + 1, batches, first_batch=first)
        y_all = torch.cat(labels)
        if clean_hits:
            stats.clean.add(y_all, torch.cat(clean_hits))
        if robust_hits:
            stats.robust.add(y_all, torch.cat(robust_hits))
        stats.samples = [int(t.item()) for t in group.gather_host(torch.tensor([float(stats.n)], dtype=torch.float64))]
        group.sum_(stats.loss_sum, stats.clean.hits, stats.clean.total, stats.robust.hits, stats.robust.total)
        stats.n = sum(stats.samples)
        self._check_finite(stats, epoch)
        return stats

    def _check_finite(self, stats: EpochStats, epoch: int) -> None:
        if not math.isfinite(float(stats.loss_sum)):
            raise Diverged(f"the training loss became {float(stats.loss_sum)} in epoch {epoch}")

    def validate(self, epoch: int) -> ValResult:
        """The validation split under the validation attack, per class: this process's rows of every
        batch (all of them in one process), the counts of every rank summed. Every rank stops at the
        same batch."""
        val, bs = self.val_data, self.profile.data.eval_batch_size
        clean_c, robust_c = metrics.ClassCounter(self.k), metrics.ClassCounter(self.k)
        batches = (len(val) + bs - 1) // bs
        for b, start in enumerate(range(0, len(val), bs)):
            draws = self.group.draws(min(bs, len(val) - start))
            part = TensorData(val.x[start + draws.lo:start + draws.hi], val.y[start + draws.lo:start + draws.hi])
            clean, adv, _ = predict(self.attack_model, part, self.val_attack, self.rt, bs, draws=draws)
            y = part.y.cpu()
            clean_c.add(y, clean == y)
            robust_c.add(y, adv == y)
            if self.group.any(self.stop_flag()):
                raise StopRequested()
            if self.progress.due():
                self.progress.update("val", epoch, b + 1, batches)
        self.group.sum_(clean_c.hits, clean_c.total, robust_c.hits, robust_c.total)
        return ValResult(clean_c.per_class(), robust_c.per_class())

    # -- the run --------------------------------------------------------------------------------
    def start_or_resume(self) -> int:
        """Return the first epoch to train; emit run_started or run_resumed. A stop inside an epoch left
        partial.pt beside last.pt: that epoch starts again from last.pt (as it started) and continues
        from the stop (:meth:`run_epoch`)."""
        if removed := self.store.remove_leftovers():
            log.info("removed %d temporary checkpoint file(s) left by an interrupted write", removed)
        state = self.store.load_last(self.rt.device)
        point = self._resume_point(state["epoch"] if state is not None else 0)
        if state is None and point is None:
            self.events.emit("run_started", **run_started_payload(self.profile, self.splits, self.rt,
                                                                  self._group_payload(), self.method.start_record()),
                             **self.method.run_record())
            self.method.initialize(self.model)
            return 1
        where = {} if point is None else {"batch": point["batches_done"], "batches": point["batches"],
                                          "phase": point["phase"]}
        if state is None:  # stopped inside the first epoch: the run starts as it started, then continues
            check_same_start(self.method, self.run_dir)
            self.method.initialize(self.model)
            epoch = 0
        else:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.method.load_state_dict(state["method"])
            if self.ema is not None and state.get("ema") is not None:
                self.ema.state = state["ema"]
            self.best = state["best"]
            self.last_val = ValResult(**state["last_val"]) if state.get("last_val") else None
            set_rng_state(state["rng"])
            epoch = state["epoch"]
        self.resume_point = point
        self.events.emit("run_resumed", epoch=epoch, device=self.rt.describe(), runtime=self.rt.options(),
                         class_names=self.splits.class_names, **where, **run_resumed_payload(self.splits),
                         **self._group_payload())
        if state is not None:
            self.events.emit_lost_epoch_end(state["epoch_event"])  # killed between the checkpoint and its event
        log.info("%s", resumed_text({"epoch": epoch, **where}))
        return epoch + 1

    def _group_payload(self) -> dict[str, Any]:
        return self.group.payload(self.sync_bn, self.profile.data.batch_size)

    def fit(self) -> None:
        first = self.start_or_resume()
        epochs = self.profile.train.epochs
        if first == 1 and self.method.needs_initial_val:
            self.last_val = self.validate(0)
        for epoch in range(first, epochs + 1):
            self.run_epoch(epoch)
        self.progress.update("done", epochs, 0, 0)

    def run_epoch(self, epoch: int) -> None:
        started = self._epoch_started = time.time()
        point, self.resume_point = self.resume_point, None
        point = point if point is not None and point["epoch"] == epoch else None
        if self.method.fresh_optimizer(epoch):
            self.optimizer = self.new_optimizer()
        lr = self.method.lr_for(epoch, lr_at(epoch, self.profile))
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr
        # A resumed epoch runs its start again from the state it began with (last.pt), as it ran: the
        # class-wise state it trains with and what prepare_epoch measures on the epoch's first model.
        self.method.start_epoch(epoch, self.last_val)
        prepared = time.time()
        self.method.prepare_epoch(epoch, lambda: self.epoch_batches(epoch, "prepare"))
        prepare_s = self._prepare_s = time.time() - prepared
        method_state = self.method.method_state()  # what epoch t trains with
        if point is not None:
            started = self._epoch_started = time.time() - point["elapsed_s"]  # the replayed start not counted
            prepare_s = self._prepare_s = point["prepare_s"]
        if point is None or point["phase"] == "train":
            stats = self.train_epoch(epoch, point)
            self.group.broadcast_buffers(self.model)  # rank 0's BatchNorm statistics: one model on all ranks
            if self.ema is not None and epoch >= self.profile.train.ema_start_epoch:
                self.ema.update(self.model)
        else:  # stopped in the validation: the epoch's training is done, its counts and states kept
            stats, self._train_batches = self._trained_point(point), point["batches"]
        before_val = rng_state() if not self.group.active else None
        try:
            val = self.validate(epoch)
        except StopRequested:
            kept = self._keep_point(epoch, "val", self._train_batches, self._train_batches,
                                    self._trained_counts(stats), rng=before_val)
            raise StopRequested(kept) from None
        train = stats.summary()
        self.method.end_epoch(epoch, self.model, train["robust_acc_per_class"], val)
        method_state.update(self.method.measurements())
        distributed = self.group.epoch_check(
            {"model": self.model.state_dict(), "ema": self.ema.state if self.ema is not None else None},
            {"method": self.method.state_dict(), "best": self.best["score"]}, f"epoch {epoch}", self.method.name,
            stats.samples or [], self.sync_bn)
        score = self.method.selection_score(val)
        is_best = self.method.selectable(epoch) and score > self.best["score"]
        if is_best:
            self.best = {"score": score, "epoch": epoch}
        self.last_val = val
        event = {
            "epoch": epoch, "epochs": self.profile.train.epochs, "lr": lr, "time_s": time.time() - started,
            "train": train, "val": val_summary(val), "method_state": method_state, "best_epoch": self.best["epoch"],
            "is_best": is_best,
        }
        if distributed is not None:
            event["distributed"] = distributed
        if prepare_s >= 0.05:  # a method's pass over the epoch's batches before training (CSR's C)
            event["prepare_s"] = prepare_s
        self.store.save(self._checkpoint(epoch, event), best_model=self.model.state_dict() if is_best else None,
                        best_meta=self.best)
        self.store.drop_partial()  # the epoch it continued is in last.pt now
        self.events.emit("epoch_end", **event)
        log.info("epoch %d/%d  loss %.4f  val clean %.3f  robust %.3f (worst %.3f)  %.1fs", epoch,
                 self.profile.train.epochs, event["train"]["loss"], event["val"]["avg_clean"],
                 event["val"]["avg_robust"], event["val"]["worst_robust"], event["time_s"])

    def _checkpoint(self, epoch: int, event: dict) -> dict[str, Any]:
        return {
            "epoch": epoch, "profile": self.profile.to_table(), "model": self.model.state_dict(),
            "identity": {"run_id": self.run_dir.name, "seed": self.profile.seed},  # whose checkpoint (owned)
            "optimizer": self.optimizer.state_dict(), "method": self.method.state_dict(),
            "ema": self.ema.state if self.ema is not None else None,
            "averaged": self.method.averaged_models(), "best": self.best, "rng": rng_state(),
            "last_val": vars(self.last_val) if self.last_val else None, "epoch_event": event,
        }
