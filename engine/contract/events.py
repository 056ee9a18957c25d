"""The run's event stream, ``events.jsonl``: one JSON object per line (docs/results-and-guarantees.md lists the events)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

from engine.contract.digest_store import Keeper

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


def parse_event(line: bytes | str) -> dict:
    """One line of the stream as an event; ValueError (saying why) for anything that is not one."""
    event = json.loads(line)
    if not isinstance(event, dict) or "type" not in event:
        raise ValueError("not an event object")
    return event


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
            event = parse_event(line)
        except ValueError as err:
            warnings.append(f"{path}:{number}: skipped an unreadable event ({err})")
            continue
        events.append(event)
    return events, warnings


def _last_seq(fh) -> int:
    """The ``seq`` of the last complete event in an open file, or -1."""
    fh.seek(0, os.SEEK_END)
    end = fh.tell()
    chunk = 4096
    while True:
        start = max(0, end - chunk)
        fh.seek(start)
        lines = fh.read(end - start).split(b"\n")
        for line in reversed(lines[1:] if start else lines):
            if line.strip():
                try:
                    return int(json.loads(line)["seq"])
                except (ValueError, KeyError, TypeError):
                    continue
        if start == 0:
            return -1
        chunk *= 4


class EventWriter:
    """Appends events with gap-free ``seq`` numbers, continuing an existing file.

    Every write holds an exclusive lock on the file and numbers the event after
    the file's last one, so a training engine and an evaluation of the same run
    can append at once without a gap or a repeated ``seq``.
    """

    def __init__(self, path: str | Path, run_id: str, keep_digest: bool = True):
        self.path = Path(path)
        self.run_id = run_id
        # called with each event once it is written (the engine's live dashboards: engine.runtime.sinks)
        self.listeners: list[Callable[[dict], None]] = []
        self._fh = open(self.path, "a+b")
        with self._locked():
            self._repair_tail()
            self.seq = _last_seq(self._fh) + 1
            # the stream's fold, kept as it is written and stored beside it (engine.contract.digest)
            self.keeper = Keeper(self.path, self._fh) if keep_digest else None

    def _locked(self):
        from engine.contract.locks import locked

        return locked(self._fh)

    def _repair_tail(self) -> None:
        """Drop a half-written last line left by a killed process."""
        self._fh.seek(0, os.SEEK_END)
        size = self._fh.tell()
        if size == 0:
            return
        self._fh.seek(size - 1)
        if self._fh.read(1) != b"\n":
            self._fh.seek(0)
            data = self._fh.read()
            self._fh.truncate(data.rfind(b"\n") + 1)

    def emit(self, type_: str, **payload: Any) -> dict:
        with self._locked():
            self._repair_tail()
            self.seq = _last_seq(self._fh) + 1
            event = {"v": SCHEMA_VERSION, "seq": self.seq, "t": time.time(), "run_id": self.run_id,
                     "type": type_, **_clean(payload)}
            line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
            offset = self._fh.seek(0, os.SEEK_END)
            if self.keeper is not None:
                self.keeper.catch_up(self._fh, offset)  # what another writer appended since
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())
            if self.keeper is not None:
                self.keeper.appended(self._fh, event, offset, len(line))
        self.seq += 1
        for listener in self.listeners:
            listener(event)
        return event

    def emit_lost_epoch_end(self, event: dict) -> None:
        """Emit the `epoch_end` of a checkpoint whose event was lost (the engine was killed between
        the checkpoint and its event), unless the stream has it."""
        events, _ = read_events(self.path)
        if max((e["epoch"] for e in events if e.get("type") == "epoch_end"), default=0) < event["epoch"]:
            self.emit("epoch_end", **event)

    def close(self) -> None:
        if self.keeper is not None and not self._fh.closed:
            with self._locked():
                self.keeper.save(self._fh)
        self._fh.close()
