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

VERSION = 3  # 2: slim events (matrices left out, with _omitted and _at); 3: stored as lines, epochs read lazily
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
    # epoch -> its latest epoch_end (slim); a fold read from a stored one keeps each as its JSON bytes until a
    # reader asks for it (the app draws every epoch; `show` needs the last and the timings alone)
    epochs: dict[int, dict | bytes] = field(default_factory=dict)
    times: dict[int, float | None] = field(default_factory=dict)  # epoch -> its time_s
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
            self.times[event["epoch"]] = event.get("time_s")
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

    def epoch(self, number: int) -> dict:
        value = self.epochs[number]
        if isinstance(value, bytes):
            value = self.epochs[number] = json.loads(value)
        return value

    def epoch_list(self) -> list[dict]:
        return [self.epoch(k) for k in sorted(self.epochs)]

    def last_epochs(self, n: int = 1) -> list[dict]:
        """The latest ``n`` epochs, oldest first, the others left unread."""
        return [self.epoch(k) for k in sorted(self.epochs)[-n:]] if n > 0 else []

    def epoch_times(self) -> list[float | None]:
        return [self.times.get(k) for k in sorted(self.epochs)]

    def eval_results(self) -> list[dict]:
        return list(self.evals.values())

    def dumps(self, extra: dict | None = None) -> bytes:
        """The fold as stored: a header line, then a line per epoch ("E<epoch>\t<event>") and per result
        ("R<event>"), so that a reader leaves the epochs it never asks for unparsed."""
        head = {"version": VERSION, "started": self.started, "finished": self.finished, "warnings": self.warnings,
                "skipped": self.skipped, "count": self.count, "lines": self.lines, "offset": self.offset,
                "fingerprint": self.fingerprint, "times": [[k, t] for k, t in self.times.items()], **(extra or {})}
        out = [json.dumps(head, separators=(",", ":")).encode()]
        for k in sorted(self.epochs):
            value = self.epochs[k]
            raw = value if isinstance(value, bytes) else json.dumps(value, separators=(",", ":")).encode()
            out.append(b"E%d\t%s" % (k, raw))
        out += [b"R" + json.dumps(e, separators=(",", ":")).encode() for e in self.evals.values()]
        return b"\n".join(out) + b"\n"

    @classmethod
    def loads(cls, data: bytes) -> tuple["Digest", dict]:
        """A stored fold and its header (ValueError when it is not one of this version)."""
        lines = data.split(b"\n")
        head = json.loads(lines[0])
        if not isinstance(head, dict) or head.get("version") != VERSION:
            raise ValueError("another version")
        d = cls(started=head["started"], finished=head["finished"], warnings=list(head["warnings"]),
                skipped=int(head["skipped"]), count=int(head["count"]), lines=int(head["lines"]),
                offset=int(head["offset"]), fingerprint=str(head["fingerprint"]))
        d.times = {int(k): t for k, t in head["times"]}
        for line in lines[1:]:
            if line[:1] == b"E":
                number, raw = line[1:].split(b"\t", 1)
                d.epochs[int(number)] = raw
            elif line[:1] == b"R":
                event = json.loads(line[1:])
                d.evals[eval_identity(event)] = event
        if set(d.epochs) != set(d.times):
            raise ValueError("epochs and their times differ")
        return d, head


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
        return Digest.loads(path.read_bytes())[0]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


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
        store(self.path, self.digest, fh)
        self.stored_at, self.stored_offset = time.monotonic(), self.digest.offset
