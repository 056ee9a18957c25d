"""Small models for digits, MNIST and the synthetic Gaussian data."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _ChannelsLast(torch.autograd.Function):
    """A channels-last copy whose gradient comes back in the input's own (contiguous) layout: a plain
    ``contiguous(memory_format=...)`` passes the channels-last gradient on, and the ReLU's and convolution's
    backward on the CPU then mix layouts, which cost more than the pool saves."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class AdaptiveMaxPool2dCL(nn.AdaptiveMaxPool2d):
    """``nn.AdaptiveMaxPool2d``, computed on the CPU from a channels-last copy of a contiguous input: the same
    values, indices and gradients, ties included (tests/engine/test_models.py), in a fraction of the time.
    PyTorch's CPU kernel for contiguous NCHW input vectorises along the row, which has 8 pixels in the digits CNN;
    channels-last vectorises along the channels. Other devices, and channels-last inputs, pool as they are."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dim() == 4 and x.is_contiguous() and not torch.jit.is_scripting():
            x = self._channels_last(x)
        return F.adaptive_max_pool2d(x, self.output_size)

    @torch.jit.unused
    def _channels_last(self, x: torch.Tensor) -> torch.Tensor:
        return _ChannelsLast.apply(x)


class SmallCNN(nn.Module):
    """Two conv blocks and two linear layers; adapts to any input size by pooling to 4x4."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(inplace=True),
            AdaptiveMaxPool2dCL(4),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * width * 16, 128), nn.ReLU(inplace=True), nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class MLP(nn.Module):
    def __init__(self, in_features: int, num_classes: int, hidden: int = 128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
