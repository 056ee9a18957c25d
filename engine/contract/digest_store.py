"""A run's fold (:class:`engine.contract.digest.Digest`) kept on disk: stored beside the stream as ``digest.json``
by the engine as it writes (:class:`Keeper`), or as a reader's cache in the home (fairtui.runs.digest), and used
again only while it still describes the stream (:func:`stored_header`): the stream is as it was, or it only grew
and the bytes the fold covered keep their fingerprint. A stream rewritten, cut short or replaced is folded again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path

from engine.contract.digest import DIGEST_FILE, VERSION, Digest, fold_from, slim

FINGERPRINT = 256  # bytes before the offset that must be unchanged for a stored fold to be used
SNAPSHOT_S = 30.0  # the engine stores its fold at most this often (and when a session ends)


def fingerprint(fh, offset: int) -> str:
    """The first 4 KB and the last FINGERPRINT bytes before ``offset``."""
    fh.seek(0)
    head = fh.read(min(offset, 4096))
    start = max(0, offset - FINGERPRINT)
    fh.seek(start)
    return hashlib.sha1(head + fh.read(offset - start)).hexdigest()


def stamp(fh) -> dict:
    """What a stored fold records of the stream it was taken from, to know it again (:func:`load_stored`)."""
    st = os.fstat(fh.fileno())
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}


def stored_header(path: Path, fh, same_file: bool = False) -> dict | None:
    """The header of a stored fold (``digest.json``, or a reader's cache) if the fold still describes the
    stream open in ``fh``: the stream is as it was when the fold was stored (same size and time), or it only
    grew since (longer, and the bytes the fold covered keep their fingerprint). A stream rewritten in place,
    cut short or replaced is folded again. ``same_file``: the stream must also be the same file (inode): a
    reader's cache in the home, never a run folder copied elsewhere with its ``digest.json``. Reads the
    header line alone."""
    try:
        with open(path, "rb") as stored:
            head = json.loads(stored.readline())
        offset = int(head["offset"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(head, dict) or head.get("version") != VERSION:
        return None
    now = stamp(fh)
    if same_file and head.get("ino") != now["ino"]:
        return None
    if [head.get("size"), head.get("mtime_ns")] == [now["size"], now["mtime_ns"]] and offset <= now["size"]:
        return head
    if isinstance(head.get("size"), int) and now["size"] > head["size"] >= offset \
            and fingerprint(fh, offset) == head.get("fingerprint"):
        return head
    return None


def load_stored(path: Path, fh, same_file: bool = False) -> Digest | None:
    """A stored fold that still describes the stream open in ``fh`` (:func:`stored_header`), else None."""
    if stored_header(path, fh, same_file) is None:
        return None
    try:
        digest = Digest.loads(path.read_bytes())[0]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    digest.source = Path(fh.name) if isinstance(getattr(fh, "name", None), (str, os.PathLike)) else None
    return digest


def store(path: Path, digest: Digest, fh) -> None:
    """Store a fold of the stream open in ``fh`` atomically; a read-only folder or a full disk leaves the
    next reader to fold again."""
    from engine.contract.atomic import atomic_write

    digest.fingerprint = fingerprint(fh, digest.offset)
    data = digest.dumps(stamp(fh))
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda out: out.write(data))


class Keeper:
    """The fold of one run's stream, kept by its writer (engine.contract.events.EventWriter) as it appends,
    and stored as ``digest.json`` beside the stream. Another writer of the same stream (an evaluation
    beside the training) is caught up with before each append, under the stream's lock."""

    def __init__(self, events_path: Path, fh):
        self.events_path = Path(events_path)
        self.path = self.events_path.parent / DIGEST_FILE
        self.digest = load_stored(self.path, fh) or Digest()
        self.digest.source = self.events_path
        self.stored_at = time.monotonic() if self.digest.offset else 0.0
        self.stored_offset = self.digest.offset

    def catch_up(self, fh, end: int) -> None:
        """Fold what is in the stream up to ``end`` and not yet folded (another writer's events)."""
        if self.digest.offset < end:
            fold_from(self.digest, fh, self.events_path, end=end)

    def appended(self, fh, event: dict, offset: int, length: int) -> None:
        """This writer appended ``event`` as the line at ``offset`` (``length`` bytes, newline included)."""
        self.digest.lines += 1
        self.digest.fold(slim(event, offset, length - 1), (offset, length - 1))
        self.digest.offset = offset + length
        if event.get("type") == "run_finished" or time.monotonic() - self.stored_at >= SNAPSHOT_S:
            self.save(fh)

    def save(self, fh) -> None:
        """Store the fold (at once; :meth:`appended` calls it when due)."""
        if self.digest.offset == self.stored_offset:
            return
        store(self.path, self.digest, fh)
        self.stored_at, self.stored_offset = time.monotonic(), self.digest.offset
