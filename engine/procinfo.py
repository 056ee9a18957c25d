"""Process identity from /proc, stdlib only (the run index imports it on every `fairtui ls`)."""

from __future__ import annotations

from pathlib import Path


def process_start_time(pid: int) -> float | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), to tell a reused pid apart."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return float(fields[19])
    except (OSError, IndexError, ValueError):
        return None
