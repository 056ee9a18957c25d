"""Model registry. Every model starts with its normalisation layer, so attacks work in [0, 1]."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from engine.contract.config import ModelConfig
from engine.models.resnet import PreActResNet18, ResNet18
from engine.models.small import MLP, SmallCNN
from engine.models.wide_resnet import WideResNet


class Normalize(nn.Module):
    """(x - mean) / std per channel, as the model's first layer (RobustBench's normalize_model)."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            return (x - self.mean[None, :, None, None]) / self.std[None, :, None, None]
        return (x - self.mean) / self.std


# name -> builder(cfg, in_channels_or_dim, num_classes)
MODELS: dict[str, Callable[[ModelConfig, tuple[int, ...], int], nn.Module]] = {
    "small_cnn": lambda cfg, shape, k: SmallCNN(shape[0], k),
    "mlp": lambda cfg, shape, k: MLP(int(torch.tensor(shape).prod()), k),
    "preact_resnet18": lambda cfg, shape, k: PreActResNet18(shape[0], k, cfg.base_width),
    "resnet18": lambda cfg, shape, k: ResNet18(shape[0], k, cfg.base_width),
    "wide_resnet": lambda cfg, shape, k: WideResNet(cfg.depth, cfg.width, shape[0], k),
}


def build_model(cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int,
                mean: tuple[float, ...], std: tuple[float, ...]) -> nn.Sequential:
    if cfg.arch != "mlp" and len(input_shape) != 3:
        raise ValueError(f"model.arch {cfg.arch!r} needs images; this data set gives vectors of shape "
                         f"{input_shape}: use arch = \"mlp\"")
    net = MODELS[cfg.arch](cfg, input_shape, num_classes)
    if cfg.mean:  # the profile states the normalisation (an imported model's)
        mean, std = cfg.mean, cfg.std
    if len(input_shape) == 1 and len(mean) == 1:  # one statistic for every feature
        mean, std = mean * input_shape[0], std * input_shape[0]
    return nn.Sequential(Normalize(mean, std), net)
