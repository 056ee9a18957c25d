"""``progress.json`` in the run folder: where the engine is inside an epoch or an evaluation.

Overwritten atomically at most every ``interval`` seconds, so a reader (the
headless command, the terminal app) can show a batch bar with an ETA without
the event stream carrying per-batch events. It names the writing process (``pid``, ``host``), so a
reader can tell a live phase from one an engine left behind when it died.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from engine.contract.atomic import atomic_write_json


class Progress:
    def __init__(self, path: Path, interval: float = 0.5):
        self.path, self.interval = path, interval
        self._last = 0.0
        self._phase: tuple = ()
        self._phase_started = time.time()

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval

    def update(self, phase: str, epoch: int, batch: int, batches: int, **extra: object) -> None:
        """``started``: when this phase (of this epoch, of this attack) began, so a reader can show an ETA."""
        self._last = time.monotonic()
        key = (phase, epoch, extra.get("attack"))
        if key != self._phase:
            self._phase, self._phase_started = key, time.time()
        atomic_write_json(self.path, {"phase": phase, "epoch": epoch, "batch": batch, "batches": batches,
                                      "t": time.time(), "started": self._phase_started, "pid": os.getpid(),
                                      "host": socket.gethostname(), **extra})
