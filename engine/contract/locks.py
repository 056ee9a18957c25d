"""File locks (``flock``), the one way fairtui takes them: the engine's run lock, the event stream's,
and the app's on meta.json, the index, the queue, its worker and a starting engine.

A lock belongs to an open file: it is released when the file is closed, by the process or by its
death, and a child that inherits the open file holds the same lock (launcher.hold_engine_lock uses
this). Two opens of one path in one process are two holders that exclude each other. Torch-free
and a leaf: the engine and the app both import it.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def locked(target: str | Path | IO, exclusive: bool = True) -> Iterator[IO]:
    """Hold a lock on ``target`` (a path, opened for appending and closed after, or an open file) for
    the block, waiting for it; shared when not ``exclusive``. Opening a path may raise OSError."""
    own = isinstance(target, (str, Path))
    fh = open(target, "a") if own else target
    try:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield fh
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        if own:
            fh.close()


def try_lock(path: str | Path, patience: float = 0.0) -> IO | None:
    """An exclusive lock on ``path`` without waiting (or for at most ``patience`` seconds): the open file
    that holds it (close it, or exit, to release), or None when another holder has it. A lock that
    stands for a process's life is taken with some patience, so that an :func:`is_locked` probe, which
    holds the lock for an instant, is never taken for a holder."""
    fh = open(path, "a")
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fh
        except BlockingIOError:
            if time.monotonic() >= deadline:
                fh.close()
                return None
        time.sleep(0.01)


def is_locked(path: str | Path) -> bool:
    """True while another open file holds a lock on ``path``; False when it does not, or the file does
    not exist or cannot be read (a probe never creates the file)."""
    try:
        fh = open(path)
    except OSError:
        return False
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        fh.close()
    return False


def release(fh: IO) -> None:
    """Give up a lock taken with :func:`try_lock` while keeping the file open."""
    fcntl.flock(fh, fcntl.LOCK_UN)
