"""The in-memory data set every reader returns, and the error a reader raises: below every reader
(datasets.py, vision.py), so that they never import each other for them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


class DataError(RuntimeError):
    """A data set could not be loaded; the message says where it looked and what to do."""


@dataclass
class TensorData:
    x: torch.Tensor  # [N, C, H, W] (or [N, D]) uint8 in 0..255 or float in [0, 1]
    y: torch.Tensor  # [N] int64

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index: np.ndarray | torch.Tensor) -> "TensorData":
        index = torch.as_tensor(index, dtype=torch.long)
        return TensorData(self.x[index], self.y[index])

    def to(self, device: torch.device) -> "TensorData":
        """The same data on ``device``, stored as it is (uint8 images stay uint8: 150 MB for CIFAR-10)."""
        return TensorData(self.x.to(device), self.y.to(device))

    def images(self, index: torch.Tensor | slice) -> torch.Tensor:
        """Float images in [0, 1] for the given rows."""
        x = self.x[index]
        return x.float().div_(255) if x.dtype == torch.uint8 else x.float()

    def per_class(self, num_classes: int) -> list[int]:
        return torch.bincount(self.y, minlength=num_classes).tolist()
