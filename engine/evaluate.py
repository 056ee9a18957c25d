"""Per-class evaluation of a model under a named attack on a data split."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from engine import metrics
from engine.attacks.noise import WHOLE, Draws
from engine.data import TensorData
from engine.utils import Runtime, eval_mode

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


def predict(model: torch.nn.Module, data: TensorData, attack: Any, runtime: Runtime, batch_size: int,
            progress: ProgressFn | None = None, seed: int | None = None, draws: Draws = WHOLE
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clean predictions, adversarial predictions and the clean confidence variance of every
    sample of ``data``: three [N] tensors on the CPU. Results stay on the device until the end.
    ``seed``: an evaluation's, whose draws are :func:`seeded_draws` per batch (None: validation during
    training, whose draws continue the training's random stream). ``draws``: the attack's, for a
    rank's rows of one validation batch (``data`` is those rows)."""
    clean, adv, conf_var = [], [], []
    n = len(data)
    batches = (n + batch_size - 1) // batch_size
    with eval_mode(model):
        for b, start in enumerate(range(0, n, batch_size)):
            x = runtime.input_format(data.images(slice(start, start + batch_size)).to(runtime.device))
            y = data.y[start:start + batch_size].to(runtime.device)
            with torch.no_grad(), runtime.autocast():
                logits = model(x)
            check_logits(logits, f"clean batch {b + 1}")
            clean.append(logits.argmax(1))
            conf_var.append(confidence_variance(logits))
            with seeded_draws(seed, b, runtime.device) if seed is not None else contextlib.nullcontext():
                x_adv = attack.perturb(x, y, draws=draws)
            with torch.no_grad(), runtime.autocast():
                adv_logits = model(x_adv)
            check_logits(adv_logits, f"adversarial batch {b + 1}")
            adv.append(adv_logits.argmax(1))
            if progress is not None:
                progress(b + 1, batches)
    empty = torch.zeros(0, dtype=torch.long)
    return (torch.cat(clean).cpu() if clean else empty), (torch.cat(adv).cpu() if adv else empty), \
        (torch.cat(conf_var).cpu() if conf_var else torch.zeros(0))


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
