"""A run's event stream, folded: what every reader needs, in memory bounded by the run, not its stream.

``events.jsonl`` grows with every epoch and every evaluation; a long run evaluated many times reaches
hundreds of megabytes. Readers (`ls`, `show`, `tag`, `compare`, `export`, the app) need only
- the first ``run_started`` (the resolved profile, the class names, where an imported model came from);
- each session's opening (``run_started`` or ``run_resumed``: where it took the run up, and the code, machine and
  data it trained with), so that a run resumed on another commit or CPU says so (:meth:`Digest.training_sessions`);
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

The engine keeps this fold as it writes (:class:`engine.contract.digest_store.Keeper`, through ``EventWriter``) and stores it in the run
folder as ``digest.json`` (:data:`DIGEST_FILE`) at most every :data:`engine.contract.digest_store.SNAPSHOT_S` seconds and when a
session ends, with the byte offset of the stream it covers and a fingerprint of the bytes before that
offset. A reader starts from it and folds only what was written after, so no reader folds a whole long
stream (fairtui.runs.digest). The file is derived: deleting it costs the next reader a fold of the stream.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

VERSION = 5  # 2: slim events (matrices left out, with _omitted and _at); 3: stored as lines, epochs read lazily;
# 4: an epoch is kept as where its line is in the stream (offset, length), read when a reader asks for it;
# 5: the sessions (each run_started and run_resumed, with its provenance)
DIGEST_FILE = "digest.json"  # in the run folder, written by the engine's EventWriter
CHUNK = 4 << 20  # bytes read at a time
MAX_WARNINGS = 20  # unreadable lines reported one by one; the rest are counted
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


# The engine's own `epoch_end` line (engine.contract.events: the envelope, then epoch, epochs, lr and time_s before
# any nested object; compact JSON, or with json.dumps's default spaces): its epoch and time are read from the line without parsing it, so that folding
# a stream of 200,000 small epochs takes seconds. Any other line is parsed.
_ENGINE_EPOCH_LINE = re.compile(rb'\{"v": ?\d+, ?"seq": ?\d+, ?"t": ?[-0-9.eE+]+, ?"run_id": ?"[^"\\]*", ?"type": ?"epoch_end", ?'
                                rb'"epoch": ?(\d+), ?"epochs": ?[^,{]*, ?"lr": ?[^,{]*, ?"time_s": ?([-0-9.eE+]+|null)[,}]')
_NAN = float("nan")  # an epoch whose time_s is missing, in the packed times


def _pack(code: str, values: list) -> bytes:
    import array
    import base64

    return base64.b64encode(array.array(code, values).tobytes())


def _unpack(code: str, packed: bytes) -> list:
    import array
    import base64

    values = array.array(code)
    values.frombytes(base64.b64decode(packed, validate=True))
    return values.tolist()


RECENT = 64  # epochs kept parsed after a reader asked for them (the latest; a long run's others are re-read)


def session_of(event: dict) -> dict:
    """What the digest keeps of a session's opening event: where it took the run up (epoch and batch: 0 for a
    run_started) and what it trained with (device, runtime options, provenance and data fingerprint: absent from the
    run_resumed of engines before they were recorded there)."""
    kept = {"type": event.get("type"), "t": event.get("t"), "epoch": event.get("epoch", 0) or 0,
            "batch": event.get("batch", 0) or 0}
    for key in ("batches", "phase", "device", "runtime", "data_fingerprint", "provenance"):
        if event.get(key) is not None:
            kept[key] = event[key]
    return kept


@dataclass
class Digest:
    started: dict | None = None
    sessions: list[dict] = field(default_factory=list)  # each run_started / run_resumed, as session_of keeps it
    # epoch -> its latest epoch_end: where its line is in the stream, (offset, length), read (and slimmed) when a
    # reader asks for it (`show` needs the last and the timings alone; the app draws a stride of them), so that a
    # fold's memory does not grow with the stream; a slim event (a dict) when it was folded without its place
    epochs: dict[int, tuple[int, int] | dict | bytes] = field(default_factory=dict)
    source: Path | None = None  # the stream the places point into
    times: dict[int, float | None] = field(default_factory=dict)  # epoch -> its time_s
    finished: dict | None = None
    evals: dict[str, dict] = field(default_factory=dict)  # identity -> latest, oldest first
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0  # unreadable lines (the first MAX_WARNINGS have a warning each)
    count: int = 0  # events folded
    lines: int = 0  # lines consumed (for the line numbers of warnings)
    offset: int = 0  # bytes consumed: complete lines only
    fingerprint: str = ""
    recent: dict[int, dict] = field(default_factory=dict, repr=False, compare=False)

    def fold(self, event: dict, at: tuple[int, int] | None = None) -> None:
        """Fold one event; ``at``: where its line is in the stream (offset, length), kept for an epoch instead of
        the event."""
        kind = event.get("type")
        self.count += 1
        if kind == "run_started":
            if self.started is None:
                self.started = event
            self.sessions.append(session_of(event))
            self.finished = None
        elif kind == "run_resumed":
            self.sessions.append(session_of(event))
            self.finished = None
        elif kind == "run_finished":
            self.finished = event
        elif kind == "epoch_end" and isinstance(event.get("epoch"), int):
            self.epochs[event["epoch"]] = at if at is not None else event
            self.recent.pop(event["epoch"], None)
            self.times[event["epoch"]] = event.get("time_s")
        elif kind == "eval_result":
            key = eval_identity(event)
            self.evals.pop(key, None)  # the latest goes last: the order is the order of measurement
            self.evals[key] = event

    def fold_line(self, line: bytes, name: Path | str, number: int, offset: int, locate: bool = True) -> None:
        """Fold one line of the stream that starts at byte ``offset``; ``locate``: an epoch is kept as its place
        in the stream (not for a last line still being written, which may change)."""
        if not line.strip():
            return
        if locate and line.endswith(b"}") and (fast := _ENGINE_EPOCH_LINE.match(line)) is not None:
            epoch, time_s = int(fast.group(1)), fast.group(2)
            self.count += 1
            self.epochs[epoch] = (offset, len(line))
            self.recent.pop(epoch, None)
            self.times[epoch] = None if time_s == b"null" else float(time_s)
            return
        try:
            event = parse_line(line)
        except ValueError as err:
            self.warn(name, number, err)
            return
        self.fold(slim(event, offset, len(line)), (offset, len(line)) if locate else None)

    def warn(self, path: Path | str, number: int, err: Exception) -> None:
        self.skipped += 1
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(f"{path}:{number}: skipped an unreadable event ({err})")

    def all_warnings(self) -> list[str]:
        more = self.skipped - len(self.warnings)
        return self.warnings + ([f"... and {more} more unreadable lines"] if more > 0 else [])

    def epoch(self, number: int) -> dict:
        """Epoch ``number``'s latest epoch_end, slim: read from its line of the stream when the fold kept its place
        (the latest RECENT read are kept parsed)."""
        value = self.epochs[number]
        if isinstance(value, dict):
            return value
        if isinstance(value, bytes):
            value = self.epochs[number] = json.loads(value)
            return value
        if number in self.recent:
            return self.recent[number]
        event = self._read(number, value)
        self.recent[number] = event
        if len(self.recent) > RECENT:
            self.recent.pop(min(self.recent))
        return event

    def _read(self, number: int, at: tuple[int, int]) -> dict:
        """The epoch_end at ``at`` in the stream, slim; a stand-in holding its number and time when the line no
        longer holds it (the stream was replaced under this fold: the next read folds it again)."""
        try:
            with open(self.source, "rb") as fh:  # type: ignore[arg-type]
                fh.seek(at[0])
                event = slim(parse_line(fh.read(at[1])), at[0], at[1])
            if event.get("type") == "epoch_end" and event.get("epoch") == number:
                return event
        except (OSError, TypeError, ValueError):
            pass
        return {"type": "epoch_end", "epoch": number, "time_s": self.times.get(number), "train": {}, "val": {},
                "_unread": True}

    def epoch_list(self) -> list[dict]:
        """Every epoch, in order: reads the whole stream's epochs (the figures of a run); a screen that draws a
        long run asks for :meth:`sampled_epochs`."""
        return [self.epoch(k) for k in sorted(self.epochs)]

    def sampled_epochs(self, limit: int, last: int = 50) -> list[dict]:
        """At most about ``limit`` epochs, in order: every one when there are no more; else a stride over the run
        (the first epoch included) and the latest ``last`` whole, so that a run of 200,000 epochs opens in the
        time and memory of a short one."""
        keys = sorted(self.epochs)
        if len(keys) <= limit:
            return [self.epoch(k) for k in keys]
        head, tail = keys[:-last], keys[-last:]
        stride = -(-len(head) // max(1, limit - last))
        return [self.epoch(k) for k in head[::stride] + tail]

    def last_epochs(self, n: int = 1) -> list[dict]:
        """The latest ``n`` epochs, oldest first, the others left unread."""
        return [self.epoch(k) for k in sorted(self.epochs)[-n:]] if n > 0 else []

    def epoch_times(self) -> list[float | None]:
        return [self.times.get(k) for k in sorted(self.epochs)]

    def eval_results(self) -> list[dict]:
        return list(self.evals.values())

    def training_sessions(self) -> list[dict]:
        """The sessions that trained or evaluated something: each but one that the next took up at the very place
        it had taken the run up (a run lost before its first epoch and started again; a resume stopped before
        its first batch). Their code, CPU and data are those of the run's numbers."""
        def place(session: dict | None) -> tuple | None:
            return None if session is None else (session.get("epoch", 0), session.get("batch", 0))

        return [s for s, after in zip(self.sessions, self.sessions[1:] + [None]) if place(after) != place(s)]

    def dumps(self, extra: dict | None = None) -> bytes:
        """The fold as stored: a header line; one line ("P") with every epoch's place in the stream and every
        epoch's time, as packed arrays (a run of 200,000 epochs loads in milliseconds); a line per epoch kept as
        an event ("E<epoch>\t<event>"), and per result ("R<event>")."""
        head = {"version": VERSION, "started": self.started, "sessions": self.sessions, "finished": self.finished,
                "warnings": self.warnings,
                "skipped": self.skipped, "count": self.count, "lines": self.lines, "offset": self.offset,
                "fingerprint": self.fingerprint, **(extra or {})}
        out = [json.dumps(head, separators=(",", ":")).encode()]
        placed = sorted(k for k, v in self.epochs.items() if isinstance(v, tuple))
        timed = sorted(self.times)
        out.append(b"P" + b",".join(_pack(code, values) for code, values in (
            ("q", placed), ("q", [self.epochs[k][0] for k in placed]), ("q", [self.epochs[k][1] for k in placed]),
            ("q", timed), ("d", [_NAN if self.times[k] is None else self.times[k] for k in timed]))))
        for k in sorted(self.epochs):
            value = self.epochs[k]
            if not isinstance(value, tuple):
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
        d = cls(started=head["started"], sessions=list(head["sessions"]), finished=head["finished"],
                warnings=list(head["warnings"]),
                skipped=int(head["skipped"]), count=int(head["count"]), lines=int(head["lines"]),
                offset=int(head["offset"]), fingerprint=str(head["fingerprint"]))
        for line in lines[1:]:
            if line[:1] == b"P":
                placed, offsets, lengths, timed, times = (_unpack(code, part) for code, part in
                                                          zip("qqqqd", line[1:].split(b",")))
                if not len(placed) == len(offsets) == len(lengths) or len(timed) != len(times):
                    raise ValueError("places and times of another length")
                d.epochs.update(zip(placed, zip(offsets, lengths)))
                d.times = {k: None if t != t else t for k, t in zip(timed, times)}
            elif line[:1] == b"E":
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
    if digest.source is None:
        digest.source = Path(name)
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
