"""Reading a run's folded event stream (engine.contract.digest: what is kept, and why it is bounded by the
run, not its stream).

:func:`read_digest` starts from the most advanced stored fold that still describes the stream, the engine's
``digest.json`` in the run folder or this home's cache ``<home>/.cache/digests/<run_id>.json``, and folds only
the bytes written after it, in chunks. A stream that was replaced, cut short or rewritten in place is folded
again from its start. When a reader had to fold many bytes itself (a run written before the engine kept
its fold, or a long stretch since the engine last stored it), it keeps its fold in the cache, outside the
run folder (whose changes the index watches). Streams under :data:`CACHE_MIN_BYTES` are folded without a
cache (parsing them costs less than reading one). Every stored fold is only a cache: deleting it changes
nothing but the time of the next read.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable

from engine.contract import digest as contract
from engine.contract import digest_store as stored
from engine.contract.digest import DIGEST_FILE, Digest, eval_identity, full_event  # noqa: F401 (re-exported)

CHUNK = contract.CHUNK
CACHE_MIN_BYTES = 4 << 20


REPLAY_EPOCHS = 2000  # the most epochs the app's run screen reads of a finished stretch of a run (a stride)


def replay(digest: Digest, limit: int = REPLAY_EPOCHS) -> list[dict]:
    """The digest as a short stream in the order of a run (start, epochs and resumes, evaluations, end), for readers
    that ingest events one by one (the app's run screen). A run of more than ``limit`` epochs gives a stride of
    them and its latest ones whole (:meth:`Digest.sampled_epochs`): its charts keep their shape, and opening it
    costs what a short run's does."""
    head = [digest.started] if digest.started else []
    # each resume where it came, after the epoch it took the run up from (the log says "resumed in epoch 2,
    # after batch 46 of 157" where the run stopped, as it did live)
    resumes = [s for s in digest.sessions if s.get("type") == "run_resumed"]
    body: list[dict] = []
    for event in digest.sampled_epochs(limit):
        while resumes and resumes[0]["epoch"] < event["epoch"]:
            body.append(resumes.pop(0))
        body.append(event)
    return head + body + resumes + digest.eval_results() + ([digest.finished] if digest.finished else [])


def cache_path(run_dir: Path) -> Path | None:
    """Where a reader keeps a run's fold: in its home, outside the run folder (whose changes the index
    watches); None for a folder that is not a home's run."""
    if run_dir.parent.name != "runs":
        return None
    return run_dir.parent.parent / ".cache" / "digests" / f"{run_dir.name}.json"


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
        # the stored fold that covers the most (each judged by its header line alone), then read whole
        candidates = [(run_dir / DIGEST_FILE, False)] + ([(cache, True)] if cache is not None else [])
        heads = [(head["offset"], path, same) for path, same in candidates
                 if (head := stored.stored_header(path, fh, same)) is not None]
        digest = None
        for _, path, same in sorted(heads, key=lambda h: -h[0]):
            digest = stored.load_stored(path, fh, same)
            if digest is not None:
                break
        digest = digest or Digest()
        digest.source = events
        start = digest.offset
        partial = contract.fold_from(digest, fh, events, cancelled, chunk=CHUNK)
        if cancelled and cancelled():
            return digest
        if partial.strip():  # a last line with no newline: being written, or cut short by a kill
            digest.fold_line(partial, events, digest.lines + 1, digest.offset, locate=False)  # shown, never stored
        elif cache is not None and digest.offset - start >= CACHE_MIN_BYTES:
            stored.store(cache, digest, fh)
    return digest


def drop_cache(run_dir: Path) -> None:
    path = cache_path(run_dir)
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
