"""The mode a model runs in for one block: eval for an attack or a measurement, restored after."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


def attack_mode(model: torch.nn.Module, mode: str) -> contextlib.AbstractContextManager:
    """The mode an attack runs the model in: "eval" (restored after), or "train" (as the loop left it)."""
    return contextlib.nullcontext() if mode == "train" else eval_mode(model)


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Put the model in eval mode for the block and restore its mode after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
