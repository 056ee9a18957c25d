"""Messages that workers post to the screens (attributes down, messages up)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class RunsLoaded(Message):
    docs: list[dict]
    waits: dict[str, str] | None = None  # why each queued run waits (LocalQueue.wait_reasons)


@dataclass
class EventsArrived(Message):
    run_id: str
    events: list[dict]


@dataclass
class ProgressRead(Message):
    progress: dict
    wait: str | None = None  # a queued run: what it waits for (LocalQueue.wait_reasons)
