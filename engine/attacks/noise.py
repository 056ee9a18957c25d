"""The attacks' random draws (random starts), shardable across the ranks of a multi-process run.

In one process a draw is ``torch.rand_like(x)``. Inside :func:`sharded` (rows
[lo, hi) of a global batch of n), every rank draws for the whole global batch
and keeps its rows: each rank's generator then advances exactly as one process's
would, so the ranks stay in step and every sample gets the start it gets in a
single-process run.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

_shard: tuple[int, int, int] | None = None


@contextlib.contextmanager
def sharded(lo: int, hi: int, n: int) -> Iterator[None]:
    """Draws inside the block are rows [lo, hi) of draws for a batch of ``n``."""
    global _shard
    previous, _shard = _shard, (lo, hi, n)
    try:
        yield
    finally:
        _shard = previous


def in_shard() -> bool:
    return _shard is not None


def _draw(fn: Callable, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    if _shard is None or not shape or shape[0] != _shard[1] - _shard[0]:
        return fn(shape, device=like.device, dtype=like.dtype)
    lo, hi, n = _shard
    return fn((n, *shape[1:]), device=like.device, dtype=like.dtype)[lo:hi]


def rand_like(x: torch.Tensor) -> torch.Tensor:
    return _draw(torch.rand, tuple(x.shape), x)


def randn_like(x: torch.Tensor) -> torch.Tensor:
    return _draw(torch.randn, tuple(x.shape), x)


def rand_rows(x: torch.Tensor) -> torch.Tensor:
    """One uniform draw per sample. [B]"""
    return _draw(torch.rand, (x.shape[0],), x)
