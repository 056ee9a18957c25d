"""The attacks' random draws (random starts), shardable across the ranks of a multi-process run.

An attack takes its draws from a :class:`Draws` passed to ``perturb``. ``WHOLE``
(one process, or a batch that is not split) draws ``torch.rand_like(x)``. A
shard (rows [lo, hi) of a global batch of n, from ``Group.draws``) draws for
the whole global batch and keeps its rows: each rank's generator then advances
exactly as one process's would, so the ranks stay in step and every sample gets
the start it gets in a single-process run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Draws:
    """Rows [lo, hi) of draws for a global batch of ``n`` (``n == 0``: the batch as it is)."""

    lo: int = 0
    hi: int = 0
    n: int = 0

    @property
    def lockstep(self) -> bool:
        """Whether other ranks take the rest of the batch: every forward must run on every rank (an
        attack may not stop early on its own, SyncBatchNorm in train mode needs all ranks)."""
        return self.n > 0

    def _draw(self, fn: Callable, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        if not self.lockstep or not shape or shape[0] != self.hi - self.lo:
            return fn(shape, device=like.device, dtype=like.dtype)
        return fn((self.n, *shape[1:]), device=like.device, dtype=like.dtype)[self.lo:self.hi]

    def rand_like(self, x: torch.Tensor) -> torch.Tensor:
        return self._draw(torch.rand, tuple(x.shape), x)

    def randn_like(self, x: torch.Tensor) -> torch.Tensor:
        return self._draw(torch.randn, tuple(x.shape), x)

    def rand_rows(self, x: torch.Tensor) -> torch.Tensor:
        """One uniform draw per sample. [B]"""
        return self._draw(torch.rand, (x.shape[0],), x)


WHOLE = Draws()
