"""Weight averaging over whole state dicts (BN buffers included): EMA and CFA's FAWA share it."""

from __future__ import annotations

import torch


class WeightAverage:
    """theta_bar <- d * theta_bar + (1 - d) * theta; the first update copies theta.

    Integer buffers (BatchNorm's batch counters) are copied, not averaged.
    """

    def __init__(self, decay: float):
        self.decay = decay
        self.state: dict[str, torch.Tensor] | None = None

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        current = model.state_dict()
        if self.state is None:
            self.state = {k: v.detach().clone() for k, v in current.items()}
            return
        for k, v in current.items():
            if v.dtype.is_floating_point:
                self.state[k].mul_(self.decay).add_(v.detach(), alpha=1 - self.decay)
            else:
                self.state[k].copy_(v)
