"""`python -m engine eval RUN_DIR --request JSON`: evaluate a checkpoint under named attacks.

Appends one `eval_result` event per attack to the run's `events.jsonl`. Results
already in the stream for the same checkpoint, split, attack, eps and subset
are reused unless ``force``. Per-batch predictions are cached in
``<run>/eval_cache/`` as they are computed, so an interrupted evaluation (an
AutoAttack that takes hours) continues where it stopped when run again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.contract.config import Profile
from engine.contract.profile_io import load_run_profile
from engine.contract import EvalRequest, RequestError, check_eps, scaled_step
from engine.training.process import EXIT_USAGE, report_failure
from engine.contract.profile_schema import ProfileError
from engine.contract.events import EventWriter, read_events

log = logging.getLogger("engine")


class EvalRequestError(ValueError):
    """A bad request: exit 2 with a message that says what exists instead."""


def check_request(request: dict, profile: Profile) -> EvalRequest:
    """The request (engine.contract.EvalRequest), typed, with the profile's own values filled in: its
    attacks, eps (bounded by the run's norm), eval batch size and seed."""
    try:
        req = EvalRequest.from_json(request)
        eps = check_eps(req.eps or profile.eval.eps, profile.attack.norm)
        return dataclasses.replace(req, attacks=req.attacks or tuple(profile.eval.attacks), eps=eps,
                                   batch_size=req.batch_size or profile.data.eval_batch_size,
                                   seed=profile.seed if req.seed is None else req.seed)
    except RequestError as err:
        raise EvalRequestError(f"{err.field}: {err}") from None


def _same(event: dict, req: EvalRequest, attack: str, epoch: int, setting: dict) -> bool:
    """The stored result has this result's whole identity (engine.contract.results): it can be reused."""
    from engine.contract.results import recorded_matches

    return (event.get("type") == "eval_result" and event.get("split") == req.split
            and event.get("checkpoint") == req.checkpoint and event.get("attack") == attack
            and event.get("epoch") == epoch and isinstance(event.get("setting"), dict)
            and recorded_matches(event["setting"], setting))


class PredictionCache:
    """Per-batch predictions on disk, so an interrupted evaluation resumes batch by batch."""

    def __init__(self, folder: Path, key: dict):
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        folder.mkdir(exist_ok=True)
        self.path = folder / f"{key['checkpoint']}-{key['split']}-{key['attack']}-{digest}.pt"
        self.key = key
        self.batches: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        if self.path.exists():
            from engine.runtime.checkpoint import CheckpointError, load_checkpoint

            try:
                state = load_checkpoint(self.path, need=("key", "batches"))
            except CheckpointError as err:  # only finished batches are lost: they are computed again
                log.warning("ignoring the evaluation cache: %s", err)
                state = {}
            if state.get("key") == key:
                self.batches = state["batches"]

    def save(self) -> None:
        from engine.runtime.checkpoint import atomic_torch_save

        atomic_torch_save({"key": self.key, "batches": self.batches}, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def evaluate_run(run_dir: Path, request: dict) -> int:
    from engine.training.process import setup_logging

    setup_logging()
    try:
        profile = load_run_profile(run_dir)  # never evaluated at default settings in place of the run's
        req = check_request(request, profile)
    except (EvalRequestError, ProfileError) as err:
        return report_failure(run_dir, "eval", str(err), EXIT_USAGE)
    from engine.runtime.checkpoint import CheckpointError, CheckpointStore

    store = CheckpointStore(run_dir / "checkpoints")
    try:
        weights, epoch = store.weights(req.checkpoint)
    except CheckpointError as err:
        return report_failure(run_dir, "eval", str(err), EXIT_USAGE)
    from engine.training.process import StopFlag

    stop = StopFlag()
    stop.install()
    events = EventWriter(run_dir / "events.jsonl", run_dir.name)
    try:
        return _evaluate(run_dir, profile, req, weights, epoch, events, stop)
    finally:
        events.close()


def _evaluate(run_dir: Path, profile: Profile, req: EvalRequest, weights: dict, epoch: int, events: EventWriter,
              stop: Any) -> int:
    from engine.attacks.suite import AttackSettings, build_attack
    from engine.evaluation.evaluate import NonFiniteLogits, per_class_result
    from engine.entry.imported import ImportFailed, build
    from engine.training.process import EXIT_OK, EXIT_STOPPED
    from engine.runtime.progress import Progress
    from engine.runtime.device import make_runtime

    runtime = make_runtime(profile.train).for_evaluation()  # fp32 and eager, whatever the run trained with
    if runtime.device.type == "cpu":
        from engine.runtime.cpuload import warn_if_busy

        warn_if_busy()
    splits, data = _split_of(profile, req)

    try:  # a trained run's architecture, or an imported run's (TorchScript file, RobustBench zoo)
        model = build(profile, splits.input_shape, splits.num_classes, splits.mean, splits.std, run_dir)
    except ImportFailed as err:
        return report_failure(run_dir, "eval", str(err), EXIT_USAGE)
    model.load_state_dict(weights)
    model.to(runtime.device).eval()
    e = profile.eval
    settings = AttackSettings(eps=req.eps, step=scaled_step(e.step, e.eps, req.eps), norm=profile.attack.norm,
                              cw_kappa=e.cw_kappa, tpgd_inv_temperature=e.tpgd_inv_temperature,
                              restarts=e.restarts, seed=req.seed)
    progress = Progress(run_dir / "progress.json")
    existing, _ = read_events(run_dir / "events.jsonl")
    from engine.runtime.provenance import provenance

    where = provenance()  # this evaluation's code and machine, which need not be the training's
    for attack_name in req.attacks:
        setting = settings.result_setting(attack_name, req.n_per_class, req.batch_size,
                                          profile.data.test_per_class if req.split == "test" else 0)
        if not req.force and any(_same(ev, req, attack_name, epoch, setting) for ev in existing):
            log.info("%s @ %s on %s: reusing the stored result (--force to recompute)", attack_name,
                     req.checkpoint, req.split)
            continue
        key = {"checkpoint": req.checkpoint, "epoch": epoch, "split": req.split, "attack": attack_name,
               "eps": req.eps, "n_per_class": req.n_per_class, "batch_size": req.batch_size,
               "settings": dataclasses.asdict(settings), "draws": "per batch, seeded"}  # cf. evaluate.seeded_draws
        cache = PredictionCache(run_dir / "eval_cache", key)
        attack = build_attack(attack_name, model, settings)
        started = time.perf_counter()
        try:
            clean, adv, conf_var = _predict(model, data, attack, runtime, req.batch_size, cache, progress, stop,
                                            attack_name, settings.seed)
        except KeyboardInterrupt:
            log.warning("evaluation stopped; finished batches are kept and a rerun continues from them")
            return EXIT_STOPPED
        except NonFiniteLogits as err:
            return report_failure(run_dir, "eval", f"{attack_name} @ {req.checkpoint}: {err}", 1)
        result = per_class_result(data.y, clean, adv, splits.num_classes, conf_var)
        events.emit("eval_result", split=req.split, checkpoint=req.checkpoint, epoch=epoch,
                    attack=attack_name, eps=req.eps, n_per_class=req.n_per_class, setting=setting,
                    time_s=time.perf_counter() - started, provenance=where, **result)
        cache.remove()
        log.info("%s %s @ %s (epoch %d): clean %.3f robust %.3f worst %.3f", req.split, attack_name,
                 req.checkpoint, epoch, result["avg_clean"], result["avg_robust"], result["worst_robust"])
    progress.update("done", epoch, 0, 0)
    return EXIT_OK


def _split_of(profile: Profile, req: EvalRequest) -> tuple[Any, Any]:
    """The run's splits and the requested one: the whole split, or its class-balanced subset (the same
    images for every evaluation at that size: engine.contract.results.SUBSET_SEED)."""
    from engine.contract.results import SUBSET_SEED
    from engine.data import load_splits
    from engine.data.datasets import stratified_pick

    splits = load_splits(profile.data, profile.seed)
    data = splits.test if req.split == "test" else splits.val
    if req.n_per_class:
        data = data.subset(stratified_pick(data.y.numpy(), req.n_per_class, 1.0, np.random.default_rng(SUBSET_SEED),
                                           splits.num_classes))
    return splits, data


def _predict(model: Any, data: Any, attack: Any, runtime: Any, batch_size: int, cache: PredictionCache,
             progress: Any, stop: Any, attack_name: str, seed: int) -> tuple:
    """The one prediction loop (engine.evaluation.evaluate.predict) over the cache on disk, with `fairtui eval`'s stop
    check and progress (AutoAttack's too: which of its attacks runs, images still robust)."""
    from engine.evaluation.evaluate import predict

    batches = (len(data) + batch_size - 1) // batch_size
    # at once: a reader never takes the last phase's progress (training's, another attack's) for this one
    progress.update("eval", 0, len(cache.batches), batches, attack=attack_name,
                    **({"cached": len(cache.batches)} if cache.batches else {}))

    def check() -> None:
        if stop():
            raise KeyboardInterrupt

    if hasattr(attack, "check_stop"):  # AutoAttack: within its batch too, between forward passes
        attack.check_stop = check

    def before_batch(b: int) -> None:
        check()
        if hasattr(attack, "on_progress"):
            attack.on_progress = lambda info: progress.update("eval", 0, len(cache.batches), batches,
                                                              attack=attack_name, batch_in=b + 1, aa=info)

    return predict(model, data, attack, runtime, batch_size, seed=seed, cache=cache, before_batch=before_batch,
                   progress=lambda done, total: progress.update("eval", 0, done, total, attack=attack_name))
