"""Atomic file writes (temp file beside the target, fsync, rename), stdlib only: the engine's
checkpoints and progress, and fairtui's index and metadata, all go through here."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


class DiskFull(OSError):
    """The disk holding a run folder (or the home folder) is full; the previous file is intact."""


def _size(n: float) -> str:
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("kB", "MB"):
        n /= 1000
        if n < 1000:
            return f"{n:.1f} {unit}"
    return f"{n / 1000:.1f} GB"


def _disk_full(path: Path, err: BaseException, written: int) -> DiskFull | None:
    """A clear error when ``err`` came from a full disk (ENOSPC, or torch.save's "unexpected pos")."""
    import errno
    import shutil

    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return None
    if not (isinstance(err, OSError) and err.errno == errno.ENOSPC) and free > max(written, 1) + 1_000_000:
        return None
    previous = path.stat().st_size if path.exists() else 0
    need = f"; the previous {path.name} took {_size(previous)}" if previous else ""
    return DiskFull(errno.ENOSPC, f"the disk holding {path.parent} is full ({_size(free)} free) while writing "
                    f"{path.name} ({_size(written)} written{need}); free some space and resume: the previous "
                    f"{path.name} is intact")


def atomic_write(path: str | Path, write: Any) -> None:
    """Write through ``write(fh)`` to a temp file beside ``path``, fsync, then rename over it:
    a kill at any moment leaves either the old file or the new one, whole. A full disk raises
    :class:`DiskFull`, which says so."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        written = 0
        with contextlib.suppress(OSError):
            written = os.path.getsize(tmp)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        full = _disk_full(path, err, written) if isinstance(err, (OSError, RuntimeError)) else None
        if full is not None:
            raise full from None
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    atomic_write(path, lambda fh: fh.write(data))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj).encode())


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())
