"""Class-wise counting on the device (torch); the metrics themselves are torch-free, in engine.contract.metrics,
and named here too for the engine's modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.contract.metrics import (average, boundary_error, class_wise_variance, max_class_discrepancy,  # noqa: F401
                                     rho, summary, worst, worst_fraction_mean)

if TYPE_CHECKING:
    import torch


class ClassCounter:
    """Per-class hit and total counts accumulated on the device, no Python loop over samples."""

    def __init__(self, num_classes: int, device: "torch.device | str" = "cpu"):
        import torch

        self.k = num_classes
        self.hits = torch.zeros(num_classes, dtype=torch.float64, device=device)
        self.total = torch.zeros(num_classes, dtype=torch.float64, device=device)

    def add(self, y: "torch.Tensor", correct: "torch.Tensor") -> None:
        import torch

        self.total += torch.bincount(y, minlength=self.k)
        self.hits += torch.bincount(y, weights=correct.to(torch.float64), minlength=self.k)

    def per_class(self) -> list[float | None]:
        hits, total = self.hits.tolist(), self.total.tolist()
        return [h / t if t else None for h, t in zip(hits, total)]
