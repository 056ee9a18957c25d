"""Seeding, device selection and atomic file writes: decided once, used everywhere."""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from engine.atomic import atomic_write
from engine.config import TrainConfig


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) from the run's seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass(frozen=True)
class Runtime:
    """Device and precision, settled once from the profile."""

    device: torch.device
    autocast_dtype: torch.dtype | None
    channels_last: bool

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def describe(self) -> str:
        if self.device.type == "cuda":
            name = torch.cuda.get_device_name(self.device)
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
            return f"cuda ({name}; CUDA_VISIBLE_DEVICES={visible})"
        return "cpu"


def make_runtime(cfg: TrainConfig) -> Runtime:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if want_cuda and not torch.cuda.is_available():
        raise RuntimeError("train.device = \"cuda\" but no CUDA device is visible "
                           f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    device = torch.device("cuda", 0) if want_cuda else torch.device("cpu")
    # bf16 autocast and channels-last pay off on CUDA only; on the CPU they are ignored.
    dtype = torch.bfloat16 if (cfg.amp == "bf16" and want_cuda) else None
    return Runtime(device=device, autocast_dtype=dtype, channels_last=cfg.channels_last and want_cuda)


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """torch.save, atomically (checkpoints)."""
    atomic_write(path, lambda fh: torch.save(obj, fh))


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Put the model in eval mode for the block and restore its mode after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
