"""WideResNet (Zagoruyko & Komodakis) as used by TRADES: depth 34 or 28, widen factor 10."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.resnet import PreActBlock  # the same pre-activation block (BN-ReLU-conv, x2)


class WideResNet(nn.Module):
    def __init__(self, depth: int = 34, widen: int = 10, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"model.depth: a WideResNet depth is 6n + 4 (28, 34, ...), got {depth}")
        n = (depth - 4) // 6
        widths = [16, 16 * widen, 32 * widen, 64 * widen]
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
        blocks, cin = [], widths[0]
        for cout, stride in zip(widths[1:], (1, 2, 2)):
            for i in range(n):
                blocks.append(PreActBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(cin)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(self.blocks(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))
