"""After training: evaluate the profile's checkpoints under the profile's attacks on the test split."""

from __future__ import annotations

import copy
import logging
import time
from typing import TYPE_CHECKING

from engine.attacks.suite import build_attack
from engine.runtime.checkpoint import CheckpointError
from engine.evaluation.evaluate import per_class_result, predict

if TYPE_CHECKING:
    from engine.training.trainer import Trainer

log = logging.getLogger("engine")


def checkpoints_to_evaluate(trainer: "Trainer") -> list[str]:
    wanted = list(trainer.profile.eval.checkpoints)
    available = trainer.store.available()
    # EMA and averaged weights are evaluated whenever the run has them.
    wanted += [name for name in available if name not in ("last", "best") and name not in wanted]
    return [name for name in wanted if name in available]


def report_never_acted(trainer: "Trainer") -> None:
    """Say, once a run, what the profile asked for that the run never made: a mechanism that never acted
    (``mechanism_inactive``: FAWA that accepted no epoch) and a checkpoint of ``eval.checkpoints`` that does not
    exist (``checkpoint_missing``), each an event and a warning in engine.log. A resumed final evaluation
    finds them in the stream already and does not say them again."""
    from engine.contract.events import read_events

    events, _ = read_events(trainer.run_dir / "events.jsonl")
    said = {(e["type"], e.get("mechanism") or e.get("checkpoint")) for e in events
            if e.get("type") in ("mechanism_inactive", "checkpoint_missing")}
    inactive = trainer.method.never_acted([e for e in events if e.get("type") == "epoch_end"])
    for item in inactive:
        if ("mechanism_inactive", item["mechanism"]) not in said:
            trainer.events.emit("mechanism_inactive", **item)
            log.warning("%s never acted: %s", item["mechanism"], item["reason"])
    available = trainer.store.available()
    why = {item["checkpoint"]: item["reason"] for item in inactive if item.get("checkpoint")}
    for name in trainer.profile.eval.checkpoints:
        if name in available or ("checkpoint_missing", name) in said:
            continue
        reason = why.get(name, f"the run has no {name} checkpoint (it has: {', '.join(available) or 'none'})")
        trainer.events.emit("checkpoint_missing", checkpoint=name, reason=reason)
        log.warning("eval.checkpoints asks for %s, which this run does not have: %s", name, reason)


def same_weights(a: dict, b: dict) -> bool:
    """True when two state dicts hold the same tensors, bit for bit."""
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def final_evaluation(trainer: "Trainer") -> None:
    from engine.training.process import StopRequested

    report_never_acted(trainer)
    model = copy.deepcopy(trainer.model)
    test = trainer.splits.test
    runtime = trainer.rt.for_evaluation()  # fp32 and eager, whatever the run trained with
    done: list[tuple[str, dict, dict[str, dict]]] = []  # (checkpoint, weights, its results by attack)
    for checkpoint in checkpoints_to_evaluate(trainer):
        try:
            weights, epoch = trainer.store.weights(checkpoint, trainer.rt.device)
        except CheckpointError as err:
            log.warning("skipping %s: %s", checkpoint, err)
            continue
        twin = next(((name, results) for name, w, results in done if same_weights(w, weights)), None)
        if twin is not None:  # e.g. best is the last epoch: the same weights and the same seeded attack give
            for result in twin[1].values():  # the same numbers, so they are recorded again, not recomputed
                trainer.events.emit("eval_result", **{**result, "checkpoint": checkpoint, "epoch": epoch,
                                                      "same_weights_as": twin[0], "time_s": 0.0})
            log.info("test @ %s (epoch %d): the weights of %s, whose results it shares", checkpoint, epoch, twin[0])
            continue
        done.append((checkpoint, weights, {}))
        model.load_state_dict(weights)
        for attack_name in trainer.profile.eval.attacks:
            attack = build_attack(attack_name, model, trainer.attack_settings())

            def check() -> None:
                if trainer.stop_flag():
                    raise StopRequested()

            if hasattr(attack, "check_stop"):  # AutoAttack: within its batch too, between forward passes
                attack.check_stop = check

            def progress(b: int, n: int, _a: str = attack_name, _c: str = checkpoint) -> None:
                check()
                if trainer.progress.due():
                    trainer.progress.update("test", trainer.profile.train.epochs, b, n, attack=_a, checkpoint=_c)

            started = time.perf_counter()
            clean, adv, conf_var = predict(model, test, attack, runtime, trainer.profile.data.eval_batch_size,
                                           progress, seed=trainer.attack_settings().seed)
            result = per_class_result(test.y, clean, adv, trainer.k, conf_var)
            setting = trainer.attack_settings().result_setting(attack_name, 0, trainer.profile.data.eval_batch_size,
                                                               trainer.profile.data.test_per_class)
            fields = dict(split="test", attack=attack_name, eps=trainer.profile.eval.eps, n_per_class=0,
                          setting=setting, **result)
            done[-1][2][attack_name] = fields
            trainer.events.emit("eval_result", checkpoint=checkpoint, epoch=epoch,
                                time_s=time.perf_counter() - started, **fields)
            log.info("test %s @ %s (epoch %d): clean %.3f  robust %.3f  worst %.3f", attack_name, checkpoint,
                     epoch, result["avg_clean"], result["avg_robust"], result["worst_robust"])
