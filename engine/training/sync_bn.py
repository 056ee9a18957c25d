"""Synchronised BatchNorm (``train.sync_bn``): statistics over the whole global batch of a multi-process
run. PyTorch's SyncBatchNorm on CUDA; on the CPU (gloo, where SyncBatchNorm does not run)
:class:`GroupBatchNorm`, the same computation with a differentiable all-reduce. Used by
engine.training.distributed.Group.prepare_model."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn


class _SumAcrossRanks(torch.autograd.Function):
    """all_reduce(sum) whose gradient is the all-reduced gradient (each rank's loss depends on every
    rank's statistics), as SyncBatchNorm's backward does."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        out = t.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class GroupBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm whose training-mode statistics are those of the whole global batch across ranks.

    What ``torch.nn.SyncBatchNorm`` computes, for the CPU (gloo), where SyncBatchNorm refuses to run:
    the per-channel sum, sum of squares and count of every rank are all-reduced, the mean and the
    biased variance normalise, and the running variance takes the unbiased one. Eval mode, and a
    process outside a group, is plain BatchNorm.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        dims = [0] + list(range(2, x.dim()))
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype, device=x.device)
        stats = torch.cat([x.sum(dims), (x * x).sum(dims), count])
        total = _SumAcrossRanks.apply(stats)
        c = x.shape[1]
        n = total[2 * c]
        mean = total[:c] / n
        var = (total[c:2 * c] / n - mean * mean).clamp_min(0)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                self.running_var.mul_(1 - m).add_(var.detach() * (n / max(float(n) - 1, 1.0)), alpha=m)
        shape = [1, c] + [1] * (x.dim() - 2)
        y = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y


def convert_sync_bn(model: nn.Module, device: torch.device) -> nn.Module:
    """Every BatchNorm of ``model`` synchronised across ranks: SyncBatchNorm on CUDA, GroupBatchNorm
    on the CPU. Parameter and buffer names do not change, so checkpoints load either way."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return _convert_cpu(model)


def _convert_cpu(module: nn.Module) -> nn.Module:
    out = module
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, GroupBatchNorm):
        out = GroupBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                             module.track_running_stats)
        if module.affine:
            with torch.no_grad():
                out.weight.copy_(module.weight)
                out.bias.copy_(module.bias)
        if module.track_running_stats:
            out.running_mean.copy_(module.running_mean)
            out.running_var.copy_(module.running_var)
            out.num_batches_tracked.copy_(module.num_batches_tracked)
        out.train(module.training)
    for name, child in module.named_children():
        out.add_module(name, _convert_cpu(child))
    return out


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
