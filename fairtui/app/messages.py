"""Messages that workers post to the screens (attributes down, messages up)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class RunsLoaded(Message):
    docs: list[dict]


@dataclass
class EventsArrived(Message):
    run_id: str
    events: list[dict]


@dataclass
class ProgressRead(Message):
    progress: dict
