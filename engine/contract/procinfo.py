"""Process identity from /proc, stdlib only (the run index imports it on every `fairtui ls`)."""

from __future__ import annotations

from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): state first."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start_time(pid: int) -> float | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), to tell a reused pid apart."""
    fields = _stat_fields(pid)
    try:
        return float(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def process_exited(pid: int) -> bool:
    """True for a zombie (Z) or dead (X) process: it has exited and only waits to be reaped, which
    can take long in a container whose init reaps late. Signal 0 still reaches it."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] in ("Z", "X", "x")
