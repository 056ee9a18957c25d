"""ResNet-18 and PreAct-ResNet18 in their CIFAR form (3x3 stem, no max-pool)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class PreActBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + shortcut


class _ResNet(nn.Module):
    """Four stages of two blocks, ``w, 2w, 4w, 8w`` channels; ``w = 64`` is the papers' model."""

    def __init__(self, block: type, in_channels: int, num_classes: int, preact: bool, width: int = 64):
        super().__init__()
        self.preact = preact
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8 * width if preact else width)
        layers, cin = [], width
        for cout, stride in ((width, 1), (2 * width, 2), (4 * width, 2), (8 * width, 2)):
            layers += [block(cin, cout, stride), block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.linear = nn.Linear(8 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x)
        if not self.preact:
            out = F.relu(self.bn1(out))
        out = self.layers(out)
        if self.preact:
            out = F.relu(self.bn1(out))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)  # [B, 8w]
        return self.linear(out)


def ResNet18(in_channels: int = 3, num_classes: int = 10, width: int = 64) -> nn.Module:
    return _ResNet(BasicBlock, in_channels, num_classes, preact=False, width=width)


def PreActResNet18(in_channels: int = 3, num_classes: int = 10, width: int = 64) -> nn.Module:
    return _ResNet(PreActBlock, in_channels, num_classes, preact=True, width=width)
