"""Batch augmentation on tensors: the papers' random crop with padding and horizontal flip.

An epoch's sample order and every crop offset and flip are drawn up front on the
CPU from one generator seeded by (seed, epoch) (:func:`plan_epoch`), then moved to
the training device once. The batches are gathered and augmented where the data
lives (the GPU on CUDA), so the CPU and the GPU see the same order and the same
crops for a seed, and the hot loop never waits for the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def crop_pad(height: int) -> int:
    """Zero padding of the random crop: H/8 (4 px at 32x32)."""
    return max(height // 8, 1)


def crop_flip(x: Tensor, shift_y: Tensor, shift_x: Tensor, flip: Tensor | None) -> Tensor:
    """Crop each image at its own offset of the zero-padded input and flip where ``flip``.

    x: [B, C, H, W]; shift_y, shift_x: [B] offsets in 0..2*pad; flip: [B] bool or None.
    """
    b, _, h, w = x.shape
    pad = crop_pad(h)
    padded = F.pad(x, (pad, pad, pad, pad))
    rows = (shift_y[:, None] + torch.arange(h, device=x.device))[:, :, None]  # [B, H, 1]
    cols = (shift_x[:, None] + torch.arange(w, device=x.device))[:, None, :]  # [B, 1, W]
    batch = torch.arange(b, device=x.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)  # [B, C, H, W]
    if flip is not None:
        out = torch.where(flip[:, None, None, None], out.flip(3), out)
    return out.contiguous()


def draw_crop_flip(b: int, height: int, generator: torch.Generator, flip: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """One batch's crop offsets and flips, in the order the generator has always been read."""
    span = 2 * crop_pad(height) + 1
    shift_y = torch.randint(0, span, (b,), generator=generator)
    shift_x = torch.randint(0, span, (b,), generator=generator)
    flips = (torch.rand(b, generator=generator) < 0.5) if flip else None
    return shift_y, shift_x, flips


def random_crop_flip(x: Tensor, generator: torch.Generator, flip: bool = True) -> Tensor:
    """Random crop with zero padding H/8 and optional horizontal flip, vectorised. x: [B, C, H, W] in [0, 1]."""
    shift_y, shift_x, flips = draw_crop_flip(x.shape[0], x.shape[2], generator, flip)
    return crop_flip(x, shift_y.to(x.device), shift_x.to(x.device), None if flips is None else flips.to(x.device))


@dataclass
class EpochPlan:
    """An epoch's sample order and augmentation, fixed by (seed, epoch). Tensors: [N] each."""

    order: Tensor
    batch_size: int
    shift_y: Tensor | None = None
    shift_x: Tensor | None = None
    flip: Tensor | None = None

    @property
    def batches(self) -> int:
        return (len(self.order) + self.batch_size - 1) // self.batch_size

    def to(self, device: torch.device) -> "EpochPlan":
        move = (lambda t: None if t is None else t.to(device, non_blocking=True))
        return EpochPlan(move(self.order), self.batch_size, move(self.shift_y), move(self.shift_x),
                         move(self.flip))

    def batch(self, b: int, images, labels: Tensor, rows: tuple[int, int] | None = None) -> tuple[Tensor, Tensor]:
        """Batch ``b``: images from ``images(index)`` ([B, ...] floats in [0, 1]), augmented, and labels.
        ``rows``: only rows [lo, hi) of the batch (a rank's shard), with their own crops and flips."""
        start = b * self.batch_size
        end = min(start + self.batch_size, len(self.order))
        if rows is not None:
            start, end = start + rows[0], start + rows[1]
        take = slice(start, end)
        idx = self.order[take]
        x = images(idx)
        if self.shift_y is not None:
            x = crop_flip(x, self.shift_y[take], self.shift_x[take],
                          None if self.flip is None else self.flip[take])
        return x, labels[idx]


def plan_epoch(n: int, batch_size: int, sample_shape: tuple[int, ...], kind: str, seed: int,
               epoch: int) -> EpochPlan:
    """The order (a permutation) and, for image data, every batch's crop and flip draws."""
    gen = torch.Generator().manual_seed((seed * 100_003 + epoch) % 2**64)  # any int64 seed
    order = torch.randperm(n, generator=gen)
    plan = EpochPlan(order, batch_size)
    if kind == "none" or len(sample_shape) != 3 or n == 0:
        return plan
    draws = [draw_crop_flip(min(batch_size, n - start), sample_shape[1], gen, kind == "crop_flip")
             for start in range(0, n, batch_size)]
    plan.shift_y, plan.shift_x = torch.cat([d[0] for d in draws]), torch.cat([d[1] for d in draws])
    if kind == "crop_flip":
        plan.flip = torch.cat([d[2] for d in draws])
    return plan
