"""Where a fine-tune run started (``method.init_from``): the run and checkpoint it loaded, as the engine recorded it
or as its profile names it. Plain Python: no torch, no Textual."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.contract.protocol import INIT_CHECKPOINTS, run_checkpoint
from fairtui.runs.runfolder import RunView


@dataclass(frozen=True)
class Start:
    """The checkpoint a fine-tune run started from: its run, which checkpoint ("best", "last"; None: a file that
    is no run's checkpoint) and its epoch. ``recorded``: from `run_started`'s ``init`` (the engine wrote what it
    loaded); else inferred from ``method.init_from`` by the engine's rule (a run folder gives its best checkpoint:
    engine.contract.protocol.resolve_init_checkpoint), with no epoch to check."""

    run_id: str | None
    checkpoint: str | None
    epoch: int | None
    recorded: bool
    file: str | None = None  # recorded: the file loaded and its SHA-256
    sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "checkpoint": self.checkpoint, "epoch": self.epoch, "recorded": self.recorded}


def start_of(view: RunView) -> Start | None:
    """Where a fine-tune run started (:class:`Start`); None for a run that is no fine-tune."""
    init = (view.started or {}).get("init")
    if isinstance(init, dict) and init.get("file"):
        epoch = init.get("epoch")
        return Start(init.get("run_id"), init.get("checkpoint"), epoch if isinstance(epoch, int) else None, True,
                     init["file"], init.get("sha256"))
    ref = (view.config.get("method") or {}).get("init_from") or ""
    if not ref:
        return None
    if Path(ref).suffix == ".pt":
        own = run_checkpoint(ref)
        return Start(init_run_id(view), own[1] if own else None, None, False)
    return Start(init_run_id(view), INIT_CHECKPOINTS[0], None, False)  # a run folder: the engine's first choice


def init_run_id(view: RunView) -> str | None:
    """The run a fine-tune started from (``method.init_from``: a run folder or a checkpoint inside one), by id."""
    ref = (view.config.get("method") or {}).get("init_from") or ""
    if not ref:
        return None
    parts = Path(ref).parts
    if "runs" in parts and parts.index("runs") + 1 < len(parts):
        return parts[parts.index("runs") + 1]
    return Path(ref).name or None
