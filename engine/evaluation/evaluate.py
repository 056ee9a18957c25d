"""Per-class evaluation of a model under a named attack on a data split."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Protocol

import torch

from engine.runtime import metrics
from engine.attacks.noise import WHOLE, Draws
from engine.data import TensorData
from engine.runtime.device import Runtime
from engine.runtime.modes import eval_mode

ProgressFn = Callable[[int, int], None]


class NonFiniteLogits(ValueError):
    """The model gave NaN or inf logits: its argmax is meaningless, so no per-class number is reported."""


def check_logits(logits: torch.Tensor, what: str) -> None:
    if not torch.isfinite(logits).all():
        raise NonFiniteLogits(f"the model gives non-finite logits (NaN or inf) on {what}: no result is reported")


def confidence_variance(logits: torch.Tensor) -> torch.Tensor:
    """Per sample, the variance of the softmax vector across the C classes (Tian et al.'s CVC term). [B]"""
    return torch.softmax(logits.float(), dim=1).var(dim=1, unbiased=False)


@contextlib.contextmanager
def seeded_draws(seed: int, batch: int, device: torch.device) -> Iterator[None]:
    """The random draws of an evaluation's attack on batch ``batch`` (PGD's random start, ...), made by the
    generator seeded from the result's recorded ``seed`` and the batch index, on the CPU and the GPU alike,
    inside ``fork_rng``: the same checkpoint at the same settings gives the same numbers whatever ran
    before it in the process (training, other attacks, a resumed evaluation's cached batches), and the
    caller's random state is left as it was."""
    devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed * 1_000_003 + batch)
        yield


class BatchCache(Protocol):
    """Finished batches kept somewhere (engine.entry.eval_run.PredictionCache: on disk), so that an interrupted
    prediction continues from them: batch index -> (clean, adversarial, confidence variance), on the CPU."""

    batches: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]

    def save(self) -> None: ...


def predict(model: torch.nn.Module, data: TensorData, attack: Any, runtime: Runtime, batch_size: int,
            progress: ProgressFn | None = None, seed: int | None = None, draws: Draws = WHOLE,
            cache: BatchCache | None = None, before_batch: Callable[[int], None] | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clean predictions, adversarial predictions and the clean confidence variance of every
    sample of ``data``: three [N] tensors on the CPU. The one prediction loop: validation during
    training, the final test evaluation and `fairtui eval` all run it.

    ``seed``: an evaluation's, whose draws are :func:`seeded_draws` per batch (None: validation during
    training, whose draws continue the training's random stream). ``draws``: the attack's, for a
    rank's rows of one validation batch (``data`` is those rows). ``cache``: batches already in it are
    not computed again, and each new one is added and saved as it finishes (results then go through the
    CPU batch by batch; without a cache they stay on the device until the end). ``before_batch(b)``:
    called before batch ``b`` is computed (a stop check may raise there; AutoAttack's progress hook).
    ``progress(done, total)``: after each batch."""
    n = len(data)
    batches = (n + batch_size - 1) // batch_size
    parts: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = cache.batches if cache is not None else {}
    with eval_mode(model):
        for b in range(batches):
            if b in parts:
                continue
            if before_batch is not None:
                before_batch(b)
            sl = slice(b * batch_size, (b + 1) * batch_size)
            x = runtime.input_format(data.images(sl).to(runtime.device))
            y = data.y[sl].to(runtime.device)
            with torch.no_grad(), runtime.autocast():
                logits = model(x)
            check_logits(logits, f"clean batch {b + 1}")
            with seeded_draws(seed, b, runtime.device) if seed is not None else contextlib.nullcontext():
                x_adv = attack.perturb(x, y, draws=draws)
            with torch.no_grad(), runtime.autocast():
                adv_logits = model(x_adv)
            check_logits(adv_logits, f"adversarial batch {b + 1}")
            part = (logits.argmax(1), adv_logits.argmax(1), confidence_variance(logits))
            if cache is not None:
                parts[b] = tuple(t.cpu() for t in part)  # type: ignore[assignment]
                cache.save()
            else:
                parts[b] = part
            if progress is not None:
                progress(len(parts), batches)
    if not parts:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), torch.zeros(0)
    return tuple(torch.cat([parts[b][i] for b in range(batches)]).cpu() for i in range(3))  # type: ignore[return-value]


def per_class_result(y: torch.Tensor, clean_pred: torch.Tensor, adv_pred: torch.Tensor,
                     num_classes: int, conf_var: torch.Tensor | None = None) -> dict[str, Any]:
    """The `eval_result` numbers: per-class clean / robust accuracy and the summary metrics."""
    clean_c, robust_c = metrics.ClassCounter(num_classes), metrics.ClassCounter(num_classes)
    clean_c.add(y, clean_pred == y)
    robust_c.add(y, adv_pred == y)
    clean_acc, robust_acc = clean_c.per_class(), robust_c.per_class()
    s = metrics.summary(robust_acc)
    return {
        "clean_acc_per_class": clean_acc, "robust_acc_per_class": robust_acc,
        "avg_clean": metrics.average(clean_acc), "worst_clean": metrics.worst(clean_acc),
        "avg_robust": s["avg"], "worst_robust": s["worst"], "worst20_robust": s["worst20"],
        "cv": s["cv"], "mcd": s["mcd"], "cv_clean": metrics.class_wise_variance(clean_acc),
        "boundary_error_per_class": metrics.boundary_error(clean_acc, robust_acc),
        "confusion_matrix": confusion_matrix(y, adv_pred, num_classes),
        "count_per_class": clean_c.total.long().tolist(),
        **({"cvc_per_class": class_means(y, conf_var, num_classes)} if conf_var is not None else {}),
    }


def class_means(y: torch.Tensor, values: torch.Tensor, num_classes: int) -> list[float | None]:
    """Mean of per-sample values per class (CVC_k: the mean over class k of the confidence variance)."""
    sums = torch.zeros(num_classes, dtype=torch.float64).index_add_(0, y, values.double())
    counts = torch.bincount(y, minlength=num_classes)
    return [float(s / c) if c else None for s, c in zip(sums, counts)]


def confusion_matrix(y: torch.Tensor, pred: torch.Tensor, num_classes: int) -> list[list[int]]:
    """Rows: true class; columns: predicted class (under attack, the robustness confusion matrix)."""
    flat = torch.bincount(y * num_classes + pred, minlength=num_classes * num_classes)
    return flat.view(num_classes, num_classes).tolist()
