"""Checkpoints in ``<run>/checkpoints/``: ``last.pt`` every epoch and ``best.pt`` when it improves.

Both are written atomically (temp file, then rename), so a kill at any moment
leaves loadable files. ``last.pt`` holds everything a resume needs: model,
optimiser, RNG states, the method's own state, EMA and averaged weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from engine.utils import atomic_torch_save

class CheckpointError(RuntimeError):
    pass


class CheckpointStore:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def last_path(self) -> Path:
        return self.folder / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.folder / "best.pt"

    def save(self, state: dict[str, Any], best_model: dict | None = None, best_meta: dict | None = None) -> None:
        # best.pt first: if we die between the two writes, last.pt still says the older best.
        if best_model is not None:
            atomic_torch_save({"epoch": state["epoch"], "model": best_model, "best": best_meta,
                               "profile": state["profile"]}, self.best_path)
        atomic_torch_save(state, self.last_path)

    def load_last(self, device: torch.device | str = "cpu") -> dict[str, Any] | None:
        if not self.last_path.exists():
            return None
        return torch.load(self.last_path, map_location=device, weights_only=False)

    def available(self) -> list[str]:
        """The checkpoint names this run can be evaluated at."""
        state = self.load_last()
        if state is None:
            return []
        names = ["last"]
        if self.best_path.exists():
            names.append("best")
        if state.get("ema") is not None:
            names.append("ema")
        names += [n for n in state.get("averaged", {}) if state["averaged"][n] is not None]
        return names

    def weights(self, name: str, device: torch.device | str = "cpu") -> tuple[dict, int]:
        """The model weights of checkpoint ``name`` and the epoch they come from."""
        if name == "best":
            if not self.best_path.exists():
                raise CheckpointError(f"no best checkpoint; this run has: {', '.join(self.available())}")
            state = torch.load(self.best_path, map_location=device, weights_only=False)
            return state["model"], state["epoch"]
        state = self.load_last(device)
        if state is None:
            raise CheckpointError(f"no checkpoint in {self.folder}")
        if name == "last":
            return state["model"], state["epoch"]
        if name == "ema" and state.get("ema") is not None:
            return state["ema"], state["epoch"]
        averaged = state.get("averaged", {}).get(name)
        if averaged is not None:
            return averaged, state["epoch"]
        raise CheckpointError(f"this run has no {name!r} checkpoint; it has: {', '.join(self.available())}")
