"""Batch augmentation on tensors: the papers' random crop with padding and horizontal flip."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def random_crop_flip(x: torch.Tensor, generator: torch.Generator, flip: bool = True) -> torch.Tensor:
    """Random crop with zero padding H/8 (4 px at 32x32) and optional horizontal flip, vectorised.

    x: [B, C, H, W] in [0, 1]. The randomness comes from ``generator`` (on the
    CPU), so an epoch's augmentation is fixed by its seed and survives a resume.
    """
    b, _, h, w = x.shape
    pad = max(h // 8, 1)
    padded = F.pad(x, (pad, pad, pad, pad))
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(x.device)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(x.device)
    rows = (oy[:, None] + torch.arange(h, device=x.device))[:, :, None]  # [B, H, 1]
    cols = (ox[:, None] + torch.arange(w, device=x.device))[:, None, :]  # [B, 1, W]
    batch = torch.arange(b, device=x.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)  # [B, C, H, W]
    if flip:
        mask = (torch.rand(b, generator=generator) < 0.5).to(x.device)
        out = torch.where(mask[:, None, None, None], out.flip(3), out)
    return out.contiguous()


def augment_batch(x: torch.Tensor, kind: str, generator: torch.Generator) -> torch.Tensor:
    if kind == "none" or x.dim() != 4:
        return x
    return random_crop_flip(x, generator, flip=(kind == "crop_flip"))
