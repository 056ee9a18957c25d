"""A run's event stream, folded: what every reader needs, in memory bounded by the run, not its stream.

``events.jsonl`` grows with every epoch and every evaluation; a long run evaluated many times reaches
hundreds of megabytes. Readers (`ls`, `show`, `tag`, `compare`, the app) need only
- the first ``run_started`` (the resolved profile, the class names, where an imported model came from);
- the latest ``epoch_end`` of each epoch (a resume repeats epochs);
- the ``run_finished`` that closes the latest session (a ``run_started`` or ``run_resumed`` opens one);
- the latest ``eval_result`` of each identity: split, checkpoint, attack and setting (engine.contract.results).
  Every reader takes the latest result of an identity, whatever the checkpoint's epoch was, so an
  earlier one of the same identity is never read again.

:func:`read_digest` folds the stream event by event, reading it in chunks, and keeps the fold in
``<home>/.cache/digests/<run_id>.json`` with the byte offset it covers and a fingerprint of the bytes
before that offset. The next read folds only what was appended since; a stream that was replaced, cut
short or rewritten in place is folded again from its start (an in-place rewrite that also grows and
keeps the bytes the fingerprint covers would go unnoticed; fairtui never writes one). Streams under
:data:`CACHE_MIN_BYTES` are folded without a cache (parsing them costs less than reading one). The
cache is only a cache: deleting it changes nothing but the time of the next read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.contract.events import parse_event

VERSION = 1
CHUNK = 4 << 20  # bytes read at a time
CACHE_MIN_BYTES = 4 << 20
MAX_WARNINGS = 20  # unreadable lines reported one by one; the rest are counted
FINGERPRINT = 256  # bytes before the offset that must be unchanged for a cache to be used


def eval_identity(event: dict) -> str:
    """What makes an `eval_result` the number it is, but for the checkpoint's epoch (see module docs)."""
    setting = event.get("setting")
    if setting is None:  # results written before they carried their setting
        setting = {"eps": event.get("eps"), "n_per_class": event.get("n_per_class", 0)}
    return json.dumps([event.get("split"), event.get("checkpoint"), event.get("attack"), setting], sort_keys=True)


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


def replay(digest: Digest) -> list[dict]:
    """The digest as a short stream in the order of a run (start, epochs, evaluations, end), for readers
    that ingest events one by one (the app's run screen)."""
    head = [digest.started] if digest.started else []
    return head + digest.epoch_list() + digest.eval_results() + ([digest.finished] if digest.finished else [])


def cache_path(run_dir: Path) -> Path | None:
    """Where a run's digest is cached: in its home, outside the run folder (whose changes the index
    watches); None for a folder that is not a home's run."""
    if run_dir.parent.name != "runs":
        return None
    return run_dir.parent.parent / ".cache" / "digests" / f"{run_dir.name}.json"


def _fingerprint(fh, offset: int) -> str:
    """The first 4 KB and the last FINGERPRINT bytes before ``offset``."""
    fh.seek(0)
    head = fh.read(min(offset, 4096))
    start = max(0, offset - FINGERPRINT)
    fh.seek(start)
    return hashlib.sha1(head + fh.read(offset - start)).hexdigest()


def _cached(path: Path | None, fh, stat: os.stat_result) -> Digest | None:
    """The cached digest if it still describes the stream: unchanged since (same size and time), or only
    appended to (longer, the same bytes at its start and before the offset). A stream rewritten in place,
    cut short or replaced is folded again."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
        digest = Digest.from_json(doc)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if doc.get("ino") != stat.st_ino:
        return None
    if [doc.get("size"), doc.get("mtime_ns")] == [stat.st_size, stat.st_mtime_ns]:
        return digest
    if stat.st_size > doc.get("size", -1) and _fingerprint(fh, digest.offset) == digest.fingerprint:
        return digest
    return None


def read_digest(run_dir: Path, cancelled: Callable[[], bool] | None = None) -> Digest:
    """The folded ``events.jsonl`` of ``run_dir`` (see the module docs). ``cancelled``: checked between
    chunks; when it says so, the fold stops where it is (the app's screen was closed)."""
    events = run_dir / "events.jsonl"
    cache = cache_path(run_dir)
    try:
        fh = open(events, "rb")
    except OSError:
        return Digest()
    with fh:
        stat = os.fstat(fh.fileno())
        digest = _cached(cache, fh, stat) or Digest()
        start = digest.offset
        partial = fold_from(digest, fh, events, cancelled)
        if cancelled and cancelled():
            return digest
        if partial.strip():  # a last line with no newline: being written, or cut short by a kill
            _fold_line(digest, partial, events, digest.lines + 1)  # shown, never cached
        elif cache is not None and digest.offset > start and digest.offset >= CACHE_MIN_BYTES \
                and not (cancelled and cancelled()):
            digest.fingerprint = _fingerprint(fh, digest.offset)
            _write_cache(cache, {**digest.to_json(), "ino": stat.st_ino, "size": digest.offset,
                                 "mtime_ns": os.fstat(fh.fileno()).st_mtime_ns})
    return digest


def fold_from(digest: Digest, fh, name: Path | str, cancelled: Callable[[], bool] | None = None) -> bytes:
    """Fold the complete lines after ``digest.offset``; return what follows the last newline (a line
    still being written, which the offset does not cover)."""
    fh.seek(digest.offset)
    partial = b""
    while not (cancelled and cancelled()):
        data = fh.read(CHUNK)
        if not data:
            break
        lines = (partial + data).split(b"\n")
        partial = lines.pop()
        for line in lines:
            digest.lines += 1
            digest.offset += len(line) + 1
            _fold_line(digest, line, name, digest.lines)
    return partial


def _fold_line(digest: Digest, line: bytes, name: Path | str, number: int) -> None:
    if not line.strip():
        return
    try:
        event = parse_event(line)
    except ValueError as err:
        digest.warn(name, number, err)
        return
    digest.fold(event)


def _write_cache(path: Path, doc: dict) -> None:
    from engine.atomic import atomic_write_text

    with contextlib.suppress(OSError):  # a read-only home, a full disk: the next read folds again
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(doc, separators=(",", ":")))


def drop_cache(run_dir: Path) -> None:
    path = cache_path(run_dir)
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
