"""Checkpoints in ``<run>/checkpoints/``: ``last.pt`` every epoch and ``best.pt`` when it improves.

Both are written atomically (temp file, then rename), so a kill at any moment
leaves loadable files. ``last.pt`` holds everything a resume needs: model,
optimiser, RNG states, the method's own state, EMA and averaged weights.

``partial.pt``: a stop (``fairtui stop``, Ctrl-C, SIGTERM) inside an epoch keeps the epoch's work
so far: the model, optimiser and RNG states at the batch it stopped after, the method's sums over
the epoch's batches and the loop's own counts (engine.training.trainer). It complements ``last.pt`` (the
epoch before), is never evaluated, and is removed when its epoch ends. A kill (SIGKILL, a lost
machine) writes nothing: such a run resumes from ``last.pt``.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import torch

from engine.contract.atomic import atomic_write

NAMES_FILE = "names.json"
PARTIAL = "partial.pt"  # a stop's mid-epoch state (see the module's text)



def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """torch.save, atomically: a temporary file, then a rename, so that a kill at any moment leaves a loadable
    checkpoint."""
    atomic_write(path, lambda fh: torch.save(obj, fh))

class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, or not one that fairtui wrote (exit 2; nothing of it ran)."""


def _numpy_globals() -> list:
    """What checkpoints written before the RNG state was stored as plain values hold: NumPy's
    MT19937 key array. Plain arrays of numbers; object arrays would still need other globals."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_checkpoint(path: Path, device: torch.device | str = "cpu", need: tuple[str, ...] = ("model",)) -> dict:
    """Load a checkpoint without running code: ``weights_only=True`` admits tensors, containers and
    numbers only (plus NumPy number arrays from older fairtui checkpoints). A file that would need
    anything else, a pickle with code in it included, is refused with :class:`CheckpointError`."""
    import pickle

    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            state = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        reason = next((line.strip() for line in str(err).splitlines()
                       if "global" in line.lower() and ("unsupported" in line.lower() or "blocked" in line)), None)
        if reason is None:  # not a pickle fairtui could have written: damaged or another format
            raise CheckpointError(f"{path}: not a readable checkpoint (damaged, or not written by "
                                  "torch.save)") from None
        raise CheckpointError(f"{path}: refused: loading it would run code or build objects fairtui never "
                              f"stores ({reason[:160]}); nothing in it was run") from None
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except (OSError, RuntimeError, EOFError, ValueError) as err:
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(err).__name__}: "
                              f"{str(err).splitlines()[0][:200] if str(err) else ''})") from None
    if not isinstance(state, dict) or any(key not in state for key in need):
        raise CheckpointError(f"{path}: not a fairtui checkpoint (expected a table with "
                              f"{', '.join(repr(k) for k in need)})")
    return state


class CheckpointStore:
    """A run's checkpoints. ``writer=False`` (the ranks other than 0 of a group): reads them, writes and
    removes nothing."""

    def __init__(self, folder: Path, writer: bool = True):
        self.folder, self.writer = folder, writer
        if writer:
            folder.mkdir(parents=True, exist_ok=True)

    def remove_leftovers(self) -> int:
        """Delete the temporary files of checkpoint writes that a kill interrupted (``.last.pt.*``,
        ``.best.pt.*``: never renamed, so never loaded); the number removed. Only the engine that holds
        the run's lock calls this, so no write of another engine can be in flight."""
        removed = 0
        for name in ("last.pt", "best.pt", PARTIAL) if self.writer else ():
            for tmp in self.folder.glob(f".{name}.*"):
                tmp.unlink(missing_ok=True)
                removed += 1
        return removed

    @property
    def last_path(self) -> Path:
        return self.folder / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.folder / "best.pt"

    def save(self, state: dict[str, Any], best_model: dict | None = None, best_meta: dict | None = None) -> None:
        if not self.writer:
            return
        # best.pt first: if we die between the two writes, last.pt still says the older best.
        if best_model is not None:
            atomic_torch_save({"epoch": state["epoch"], "model": best_model, "best": best_meta,
                               "profile": state["profile"], "identity": state.get("identity")}, self.best_path)
        atomic_torch_save(state, self.last_path)
        self.write_names(state)

    def write_names(self, state: dict[str, Any]) -> None:
        """``names.json`` beside the checkpoints: the names :meth:`available` gives, for readers that must
        not load torch or a checkpoint to list them (the app's evaluate dialog, fairtui.runs.runfolder)."""
        from engine.contract.atomic import atomic_write_json

        atomic_write_json(self.folder / NAMES_FILE, {"names": self._names(state), "epoch": state.get("epoch")})

    def _names(self, state: dict[str, Any]) -> list[str]:
        names = ["last"] + (["best"] if self.best_path.exists() else [])
        names += ["ema"] if state.get("ema") is not None else []
        return names + [n for n, weights in (state.get("averaged") or {}).items() if weights is not None]

    @property
    def partial_path(self) -> Path:
        return self.folder / PARTIAL

    def save_partial(self, state: dict[str, Any]) -> None:
        if self.writer:
            atomic_torch_save(state, self.partial_path)

    def load_partial(self, device: torch.device | str = "cpu") -> dict[str, Any] | None:
        if not self.partial_path.exists():
            return None
        return load_checkpoint(self.partial_path, device, need=("model", "epoch", "batches_done", "optimizer", "rng"))

    def drop_partial(self) -> None:
        if self.writer:
            self.partial_path.unlink(missing_ok=True)

    def load_last(self, device: torch.device | str = "cpu") -> dict[str, Any] | None:
        if not self.last_path.exists():
            return None
        return self.owned(load_checkpoint(self.last_path, device, need=("model", "epoch", "optimizer", "rng")),
                          self.last_path)

    def owned(self, state: dict[str, Any], path: Path) -> dict[str, Any]:
        """``state`` when the checkpoint is this run's (its ``identity`` names this run folder; a checkpoint of an
        engine before the identity is taken as it is). One of another run (a checkpoints/ folder copied over) is
        set aside under another name and refused in one line: resumed or evaluated, it would give numbers that
        belong to neither run."""
        ident = state.get("identity")
        mine = self.folder.parent.name
        if not isinstance(ident, dict) or ident.get("run_id") in (None, mine):
            return state
        aside = path.with_name(f"{path.name}.set-aside-{int(time.time())}")
        if self.writer:
            try:
                path.rename(aside)
            except OSError:
                aside = None
        kept = f"; set aside as {aside.name}" if self.writer and aside is not None else ""
        raise CheckpointError(f"{path.name} is run {ident.get('run_id')}'s (seed {ident.get('seed')}), not this run's "
                              f"({mine}){kept}: put the run's own checkpoint back to continue, or start a new run")

    def available(self) -> list[str]:
        """The checkpoint names this run can be evaluated at."""
        state = self.load_last()
        return [] if state is None else self._names(state)

    def weights(self, name: str, device: torch.device | str = "cpu") -> tuple[dict, int]:
        """The model weights of checkpoint ``name`` and the epoch they come from."""
        if name == "best":
            if not self.best_path.exists():
                raise CheckpointError(f"no best checkpoint; this run has: {', '.join(self.available())}")
            state = self.owned(load_checkpoint(self.best_path, device, need=("model", "epoch")), self.best_path)
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


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, read in blocks (a checkpoint a fine-tune started from, an imported TorchScript
    file)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
