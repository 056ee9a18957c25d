"""The run's event stream, ``events.jsonl``: one JSON object per line (see DESIGN.md)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


def _clean(value: Any) -> Any:
    """Make a value JSON-safe: NaN and infinities become None (JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def read_events(path: str | Path) -> tuple[list[dict], list[str]]:
    """Read an events file; return the events and one warning per unreadable line."""
    events, warnings = [], []
    try:
        with open(path, "rb") as fh:
            lines = fh.read().split(b"\n")
    except FileNotFoundError:
        return [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict) or "type" not in event:
                raise ValueError("not an event object")
        except ValueError as err:
            warnings.append(f"{path}:{number}: skipped an unreadable event ({err})")
            continue
        events.append(event)
    return events, warnings


class EventWriter:
    """Appends events with gap-free ``seq`` numbers, continuing an existing file."""

    def __init__(self, path: str | Path, run_id: str):
        self.path = Path(path)
        self.run_id = run_id
        self._repair_tail()
        events, _ = read_events(self.path)
        self.seq = events[-1]["seq"] + 1 if events else 0
        self._fh = open(self.path, "a", encoding="utf-8")

    def _repair_tail(self) -> None:
        """Drop a half-written last line left by a killed process."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as fh:
                fh.truncate(cut)

    def emit(self, type_: str, **payload: Any) -> dict:
        event = {"v": SCHEMA_VERSION, "seq": self.seq, "t": time.time(), "run_id": self.run_id,
                 "type": type_, **_clean(payload)}
        self._fh.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.seq += 1
        return event

    def close(self) -> None:
        self._fh.close()
