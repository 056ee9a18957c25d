"""A run's event stream, folded: what every reader needs, in memory bounded by the run, not its stream.

``events.jsonl`` grows with every epoch and every evaluation; a long run evaluated many times reaches
hundreds of megabytes. Readers (`ls`, `show`, `tag`, `compare`, `export`, the app) need only
- the first ``run_started`` (the resolved profile, the class names, where an imported model came from);
- the latest ``epoch_end`` of each epoch (a resume repeats epochs);
- the ``run_finished`` that closes the latest session (a ``run_started`` or ``run_resumed`` opens one);
- the latest ``eval_result`` of each identity: split, checkpoint, attack and setting (engine.contract.results).
  Every reader takes the latest result of an identity, whatever the checkpoint's epoch was, so an
  earlier one of the same identity is never read again.

The fold keeps **slim** epochs and results: a value that is a list of lists (a K x K matrix: a robustness
confusion matrix, DAFA's P, Tian's confusion) is left out, and the event records which (``_omitted``:
dotted paths) and where its whole line is in the stream (``_at``: byte offset and length), so the few
readers that draw or print a matrix read that one line (:func:`full_event`). Everything else (the per-class
numbers, the method's class-wise vectors, the timings) is kept as written.

The engine keeps this fold as it writes (:class:`Keeper`, through ``EventWriter``) and stores it in the run
folder as ``digest.json`` (:data:`DIGEST_FILE`) at most every :data:`SNAPSHOT_S` seconds and when a
session ends, with the byte offset of the stream it covers and a fingerprint of the bytes before that
offset. A reader starts from it and folds only what was written after, so no reader folds a whole long
stream (fairtui.digest). The file is derived: deleting it costs the next reader a fold of the stream.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

VERSION = 2  # 2: slim events (matrices left out, with _omitted and _at)
DIGEST_FILE = "digest.json"  # in the run folder, written by the engine's EventWriter
CHUNK = 4 << 20  # bytes read at a time
MAX_WARNINGS = 20  # unreadable lines reported one by one; the rest are counted
FINGERPRINT = 256  # bytes before the offset that must be unchanged for a stored fold to be used
SNAPSHOT_S = 30.0  # the engine stores its fold at most this often (and when a session ends)
SLIM_TYPES = ("epoch_end", "eval_result")


def eval_identity(event: dict) -> str:
    """What makes an `eval_result` the number it is, but for the checkpoint's epoch (see module docs)."""
    setting = event.get("setting")
    if setting is None:  # results written before they carried their setting
        setting = {"eps": event.get("eps"), "n_per_class": event.get("n_per_class", 0)}
    return json.dumps([event.get("split"), event.get("checkpoint"), event.get("attack"), setting], sort_keys=True)


def _matrix(value) -> bool:
    return isinstance(value, list) and any(isinstance(v, list) for v in value)


def slim(event: dict, offset: int, length: int) -> dict:
    """``event`` without its matrices (lists of lists, at any depth of its objects); when one was left out,
    ``_omitted`` names it (dotted path) and ``_at`` = [offset, length] locates the whole line."""
    if event.get("type") not in SLIM_TYPES:
        return event
    omitted: list[str] = []

    def strip(obj: dict, prefix: str) -> dict:
        out = {}
        for key, value in obj.items():
            if _matrix(value):
                omitted.append(prefix + key)
            elif isinstance(value, dict):
                out[key] = strip(value, f"{prefix}{key}.")
            else:
                out[key] = value
        return out

    lean = strip(event, "")
    if not omitted:
        return event
    lean["_omitted"], lean["_at"] = omitted, [offset, length]
    return lean


def full_event(events_path: Path, event: dict) -> dict:
    """The whole event a slim one stands for (read from its line of the stream); ``event`` itself when
    nothing was left out of it, or when its line no longer holds it (a stream replaced since)."""
    at = event.get("_at")
    if not at:
        return event
    try:
        with open(events_path, "rb") as fh:
            fh.seek(at[0])
            whole = json.loads(fh.read(at[1]))
    except (OSError, ValueError):
        return event
    same = isinstance(whole, dict) and all(whole.get(k) == event.get(k) for k in ("seq", "type", "epoch"))
    return whole if same else event


@dataclass
class Digest:
    started: dict | None = None
    epochs: dict[int, dict] = field(default_factory=dict)
    finished: dict | None = None
    evals: dict[str, dict] = field(default_factory=dict)  # identity -> latest, oldest first
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0  # unreadable lines (the first MAX_WARNINGS have a warning each)
    count: int = 0  # events folded
    lines: int = 0  # lines consumed (for the line numbers of warnings)
    offset: int = 0  # bytes consumed: complete lines only
    fingerprint: str = ""

    def fold(self, event: dict) -> None:
        kind = event.get("type")
        self.count += 1
        if kind == "run_started":
            if self.started is None:
                self.started = event
            self.finished = None
        elif kind == "run_resumed":
            self.finished = None
        elif kind == "run_finished":
            self.finished = event
        elif kind == "epoch_end" and isinstance(event.get("epoch"), int):
            self.epochs[event["epoch"]] = event
        elif kind == "eval_result":
            key = eval_identity(event)
            self.evals.pop(key, None)  # the latest goes last: the order is the order of measurement
            self.evals[key] = event

    def fold_line(self, line: bytes, name: Path | str, number: int, offset: int) -> None:
        """Fold one line of the stream that starts at byte ``offset``."""
        if not line.strip():
            return
        try:
            event = parse_line(line)
        except ValueError as err:
            self.warn(name, number, err)
            return
        self.fold(slim(event, offset, len(line)))

    def warn(self, path: Path | str, number: int, err: Exception) -> None:
        self.skipped += 1
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(f"{path}:{number}: skipped an unreadable event ({err})")

    def all_warnings(self) -> list[str]:
        more = self.skipped - len(self.warnings)
        return self.warnings + ([f"... and {more} more unreadable lines"] if more > 0 else [])

    def epoch_list(self) -> list[dict]:
        return [self.epochs[k] for k in sorted(self.epochs)]

    def eval_results(self) -> list[dict]:
        return list(self.evals.values())

    def to_json(self) -> dict:
        return {"version": VERSION, "started": self.started, "epochs": self.epoch_list(), "finished": self.finished,
                "evals": self.eval_results(), "warnings": self.warnings, "skipped": self.skipped,
                "count": self.count, "lines": self.lines, "offset": self.offset, "fingerprint": self.fingerprint}

    @classmethod
    def from_json(cls, doc: dict) -> "Digest":
        if doc.get("version") != VERSION:
            raise ValueError("another version")
        d = cls(started=doc["started"], finished=doc["finished"], warnings=list(doc["warnings"]),
                skipped=int(doc["skipped"]), count=int(doc["count"]), lines=int(doc["lines"]),
                offset=int(doc["offset"]), fingerprint=str(doc["fingerprint"]))
        d.epochs = {e["epoch"]: e for e in doc["epochs"]}
        d.evals = {eval_identity(e): e for e in doc["evals"]}
        return d


def parse_line(line: bytes | str) -> dict:
    event = json.loads(line)
    if not isinstance(event, dict) or "type" not in event:
        raise ValueError("not an event object")
    return event


def fold_from(digest: Digest, fh, name: Path | str, cancelled: Callable[[], bool] | None = None,
              end: int | None = None, chunk: int = CHUNK) -> bytes:
    """Fold the complete lines after ``digest.offset`` (up to byte ``end`` when given); return what follows
    the last newline (a line still being written, which the offset does not cover)."""
    fh.seek(digest.offset)
    partial = b""
    while not (cancelled and cancelled()):
        want = chunk if end is None else min(chunk, end - digest.offset - len(partial))
        data = fh.read(want) if want > 0 else b""
        if not data:
            break
        lines = (partial + data).split(b"\n")
        partial = lines.pop()
        for line in lines:
            digest.lines += 1
            digest.fold_line(line, name, digest.lines, digest.offset)
            digest.offset += len(line) + 1
    return partial


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


def load_stored(path: Path, fh, same_file: bool = False) -> Digest | None:
    """A stored fold (``digest.json``, or a reader's cache) if it still describes the stream open in ``fh``:
    the stream is as it was when the fold was stored (same size and time), or it only grew since (longer,
    and the bytes the fold covered keep their fingerprint). A stream rewritten in place, cut short or
    replaced is folded again. ``same_file``: the stream must also be the same file (inode): a reader's cache
    in the home, never a run folder copied elsewhere with its ``digest.json``."""
    try:
        doc = json.loads(path.read_text())
        digest = Digest.from_json(doc)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    now = stamp(fh)
    if same_file and doc.get("ino") != now["ino"]:
        return None
    if [doc.get("size"), doc.get("mtime_ns")] == [now["size"], now["mtime_ns"]] and digest.offset <= now["size"]:
        return digest
    if isinstance(doc.get("size"), int) and now["size"] > doc["size"] >= digest.offset \
            and fingerprint(fh, digest.offset) == digest.fingerprint:
        return digest
    return None


def store(path: Path, doc: dict) -> None:
    """Write a fold atomically; a read-only folder or a full disk leaves the next reader to fold again."""
    from engine.atomic import atomic_write_text

    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(doc, separators=(",", ":")))


class Keeper:
    """The fold of one run's stream, kept by its writer (engine.contract.events.EventWriter) as it appends,
    and stored as ``digest.json`` beside the stream. Another writer of the same stream (an evaluation
    beside the training) is caught up with before each append, under the stream's lock."""

    def __init__(self, events_path: Path, fh):
        self.events_path = Path(events_path)
        self.path = self.events_path.parent / DIGEST_FILE
        self.digest = load_stored(self.path, fh) or Digest()
        self.stored_at = time.monotonic() if self.digest.offset else 0.0
        self.stored_offset = self.digest.offset

    def catch_up(self, fh, end: int) -> None:
        """Fold what is in the stream up to ``end`` and not yet folded (another writer's events)."""
        if self.digest.offset < end:
            fold_from(self.digest, fh, self.events_path, end=end)

    def appended(self, fh, event: dict, offset: int, length: int) -> None:
        """This writer appended ``event`` as the line at ``offset`` (``length`` bytes, newline included)."""
        self.digest.lines += 1
        self.digest.fold(slim(event, offset, length - 1))
        self.digest.offset = offset + length
        if event.get("type") == "run_finished" or time.monotonic() - self.stored_at >= SNAPSHOT_S:
            self.save(fh)

    def save(self, fh) -> None:
        """Store the fold (at once; :meth:`appended` calls it when due)."""
        if self.digest.offset == self.stored_offset:
            return
        self.digest.fingerprint = fingerprint(fh, self.digest.offset)
        store(self.path, {**self.digest.to_json(), **stamp(fh)})
        self.stored_at, self.stored_offset = time.monotonic(), self.digest.offset
