"""The run index: ``<home>/runs.json``, a TinyDB file over the run folders.

The run folders are the source of truth; the index holds one small document per
run (no per-epoch data) and can be rebuilt from them (`reindex`). It is safe
with several writers (headless runs, the app, a second SSH session):
- every transaction takes an exclusive lock on ``runs.json.lock``;
- every transaction opens a fresh TinyDB (a long-lived handle caches document
  ids and loses other processes' inserts);
- the file is written to a temp file and renamed, so a crash mid-write leaves
  the previous version whole.
Entries whose status may have changed without anyone telling the index
(running, starting, queued) are reconciled with their folders whenever it is read.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

from tinydb import Query, TinyDB

from engine.contract.atomic import atomic_write_text
from engine.contract.locks import locked
from tinydb.storages import Storage

from fairtui.runs.home import ReadOnlyHome, list_run_dirs, runs_dir
from fairtui.runs.runfolder import RunView
from fairtui.runs.runstate import RECENT_EPOCHS

LIVE_STATUSES = ("running", "starting", "queued")
BATCH = 500  # documents per write when `ls` indexes folders nobody registered (see RunIndex.read)


class AtomicJSONStorage(Storage):
    """TinyDB storage that writes by temp file + rename and reads a damaged file as empty."""

    def __init__(self, path: str):
        self.path = Path(path)

    def read(self) -> dict | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            print(f"warning: {self.path} is damaged; `fairtui reindex` rebuilds it from the run folders",
                  file=sys.stderr)
            return None

    def write(self, data: dict) -> None:
        atomic_write_text(self.path, json.dumps(data, separators=(",", ":")))
        write_listing(self.path.parent, list(data.get("_default", {}).values()))

    def close(self) -> None:
        pass


def write_listing(home: Path, docs: list[dict]) -> None:
    """Beside the index, in the same locked transaction: the `ls --json` output, ready to print, and
    what could make it stale (the folder count, and the entries whose status may change on their own).
    `ls --json` then prints it without parsing or encoding megabytes of JSON."""
    docs = sorted(docs, key=lambda d: d["run_id"], reverse=True)
    folder = runs_dir(home)
    watch = {d["run_id"]: [d.get("status"), d.get("epoch"), d.get("seen")] for d in docs
             if d.get("status") in LIVE_STATUSES + ("lost",)}
    names = os.listdir(folder) if folder.is_dir() else []
    # an index that does not hold every run folder (written by `tag` in a home whose runs were copied in) is never
    # printed as the listing: -1 matches no folder count, so `ls` reads the folders and indexes them
    complete = len(docs) >= sum(1 for n in names if not n.startswith("."))
    atomic_write_text(home / "runs.listing.json", json.dumps(docs, separators=(",", ":")) + "\n")
    atomic_write_text(home / "runs.listing.meta", json.dumps(
        {"folders": len(names) if complete else -1, "watch": watch, "numbers": NUMBERS,
         "seen": {d["run_id"]: d.get("seen") for d in docs}}))


def summary_numbers(view: RunView) -> dict[str, dict[str, float]]:
    """Final numbers per evaluated checkpoint and attack: ``{"best/pgd20": {...}}`` (test split)."""
    out = {}
    for (split, ckpt, attack), r in view.results().items():
        if split == "test":
            # as measured: a view rounds once, for display (rounded here to 4 places, `ls` showed 0.722 where every
            # other view showed 0.721)
            out[f"{ckpt}/{attack}"] = {k: r.get(k) for k in ("avg_clean", "avg_robust", "worst_robust")}
    return out


def headline(doc: dict) -> tuple[str, dict | None]:
    """The result a row shows: the best checkpoint's first robust attack (else the last's)."""
    summary = doc.get("summary") or {}
    for ckpt in ("best", "last"):
        for key, value in summary.items():
            if key.startswith(ckpt + "/") and not key.endswith("/clean"):
                return key, value
    return "", None


def _round(value: Any, digits: int) -> Any:
    return round(value, digits) if isinstance(value, float) else value


def _compact(doc: dict[str, Any]) -> dict[str, Any]:
    """Leave out empty fields (readers use .get) and round times to 10 ms: `ls` over 10,000 runs
    spends its time parsing and printing this JSON."""
    out = {}
    for key, value in doc.items():
        if value is None or value == "" or value == [] or value == {}:
            continue
        out[key] = _round(value, 2) if key in ("created", "started", "finished", "proc_start") else value
    return out


def folder_stamp(run_dir: Path | str) -> float | None:
    """When the run folder last changed in a way that can change its index document: its events
    (appended, truncated, replaced) or its entries (a `queued` marker, engine.json, meta.json).
    Plain ``os.stat`` on strings: `ls` does this for every run (pathlib's objects cost twice the stat)."""
    base = os.fspath(run_dir)
    stamp = None
    for path in (base + "/events.jsonl", base, base + "/meta.json"):
        try:
            t = os.stat(path).st_mtime
        except OSError:
            continue
        if stamp is None or t > stamp:
            stamp = t
    return stamp


def _changed_since(run_dir: Path | str, doc: dict) -> bool:
    """The folder changed after its document was made: a resume from the app or the queue, an
    evaluation, a truncated event stream. The document is then made again from the folder."""
    stamp = folder_stamp(run_dir)
    if "run_id" in doc and doc.get("numbers") != NUMBERS:
        return True  # a document of an older index (numbers rounded, no device for a run that named none): once
    return stamp is not None and stamp > (doc.get("seen") or 0)


NUMBERS = "exact; ran_on"  # a document's version: test numbers as measured (rounded only by a view); the device
# a run that named none trained on (ran_on)


def document_for(run_dir: Path, view: RunView | None = None) -> dict[str, Any]:
    """The index document of one run, derived from its folder (empty fields left out)."""
    stamp = folder_stamp(run_dir)  # before reading: a change while reading makes the next read redo it
    view = view or RunView.load(run_dir)
    cfg = view.config
    meta = view.meta
    started = view.started or {}
    process = {}
    with contextlib.suppress(OSError, ValueError):
        process = json.loads((run_dir / "engine.json").read_text())
    epochs = view.last_epochs(RECENT_EPOCHS)  # the latest few: a long run's others stay unread
    finished = view.finished
    return _compact({
        "run_id": view.run_id, "name": view.name, "profile": meta.get("profile_path"),
        "method": cfg.get("method", {}).get("name"), "dataset": cfg.get("data", {}).get("dataset"),
        "model": cfg.get("model", {}).get("arch"), "seed": cfg.get("seed"), "status": view.status(),
        "host": process.get("host"), "pid": process.get("pid"), "proc_start": process.get("proc_start"),
        "gpus": meta.get("gpus") or ran_on(started), "tags": meta.get("tags", []), "notes": meta.get("notes", ""),
        "created": meta.get("created"), "started": started.get("t"),
        "finished": finished.get("t") if finished else None, "error": finished.get("error") if finished else None,
        "epoch": epochs[-1]["epoch"] if epochs else 0, "epochs": view.total_epochs(),
        # for a running run's ETA and its numbers before any test result (validation, marked as such)
        "epoch_times": [e.get("time_s") for e in epochs[-RECENT_EPOCHS:]] if epochs else None,
        "epoch_t": epochs[-1].get("t") if epochs else None,
        "val": {"avg_robust": epochs[-1]["val"].get("avg_robust"), "worst_robust": epochs[-1]["val"].get(
            "worst_robust")} if epochs else None,
        "summary": summary_numbers(view), "sweep": meta.get("sweep"), "launcher": meta.get("launcher", "local"),
        "slurm_job_id": meta.get("slurm_job_id"), "node": meta.get("node"),
        "seen": stamp, "numbers": NUMBERS,
    })


def ran_on(started: dict) -> str | None:
    """Where a run asked for no device trained: "cpu", or the GPUs it saw ("0", "0,1"), from its run_started;
    "auto" before it started (the engine chooses when it starts)."""
    import re

    from fairtui.runs.configurations import device_kind

    kind = device_kind(started)
    if kind is None:
        return "auto" if not started else None
    if kind == "cpu":
        return "cpu"
    visible = re.search(r"CUDA_VISIBLE_DEVICES=([\d,]+)", str(started["device"]))
    return visible.group(1) if visible else "gpu"


class RunIndex:
    def __init__(self, home: Path):
        self.home = home
        self.path = home / "runs.json"
        self.lock_path = home / "runs.json.lock"

    @contextlib.contextmanager
    def transaction(self, exclusive: bool = True) -> Iterator[TinyDB]:
        with contextlib.ExitStack() as stack:
            try:
                self.home.mkdir(parents=True, exist_ok=True)
                stack.enter_context(locked(self.lock_path, exclusive))
            except OSError as err:
                raise ReadOnlyHome(self.home, err) from None
            db = TinyDB(str(self.path), storage=AtomicJSONStorage)
            try:
                yield db
            except OSError as err:
                if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                    raise ReadOnlyHome(self.home, err) from None
                raise
            finally:
                db.close()

    @contextlib.contextmanager
    def _shared(self) -> Iterator[None]:
        """A shared lock for reading; none where the home folder cannot be written (a read-only mount
        of shared results), where no writer can be at work either."""
        with contextlib.ExitStack() as stack:
            with contextlib.suppress(OSError):
                if self.home.is_dir():
                    stack.enter_context(locked(self.lock_path, exclusive=False))
            yield

    def upsert(self, doc: dict) -> None:
        if not self.path.exists() and runs_dir(self.home).is_dir():
            self.read()  # never an index of part of a home: its other folders are indexed first (#71)
        with self.transaction() as db:
            _apply(db, [doc])

    def register(self, run_dir: Path) -> dict:
        doc = document_for(run_dir)
        self.upsert(doc)
        return doc

    def remove(self, run_id: str) -> None:
        """A deleted run leaves the index, and its folded stream leaves the cache (fairtui.runs.digest)."""
        from fairtui.runs.digest import drop_cache

        with self.transaction() as db:
            db.remove(Query().run_id == run_id)
        drop_cache(runs_dir(self.home) / run_id)

    def read(self) -> list[dict]:
        """Every document, newest first, reconciled with the run folders: a folder nobody registered
        joins, a folder that was deleted leaves, and a live or changed run is read again from its folder
        (meta.json's name, tags and notes included: the index never holds older meta than the folder).

        Linear and batched: the documents are made outside the index's lock and written
        :data:`BATCH` at a time, each batch one write of the file, so that `tag` and `note` wait at
        most for one batch and an interrupted first `ls` keeps what it indexed."""
        docs = self._read_all()
        folder = runs_dir(self.home)
        present = {n for n in os.listdir(folder) if not n.startswith(".")} if folder.is_dir() else set()
        gone = [d["run_id"] for d in docs if d["run_id"] not in present]
        docs = [d for d in docs if d["run_id"] in present]
        known = {d["run_id"] for d in docs}
        fresh_docs: list[dict] = []
        writable = True

        def flush(final: bool = False) -> None:
            nonlocal writable
            if writable and (len(fresh_docs) >= BATCH or (final and (fresh_docs or gone))):
                try:
                    with self.transaction() as db:
                        _apply(db, fresh_docs, gone)
                except ReadOnlyHome:  # reading needs no write access: the fresh documents are shown all the same
                    writable = False
                fresh_docs.clear()
                gone.clear()

        # folders nobody registered (yet)
        for name in sorted(present - known):
            if (folder / name / "profile.toml").exists():
                doc = document_for(folder / name)
                docs.append(doc)
                fresh_docs.append(doc)
                flush()
        for i, doc in enumerate(docs):
            if doc["run_id"] not in known:
                continue
            run_dir = folder / doc["run_id"]
            if doc.get("status") in LIVE_STATUSES or _changed_since(run_dir, doc):
                fresh = document_for(run_dir)
                if any(fresh.get(k) != doc.get(k) for k in ("status", "epoch", "seen", "name", "tags", "notes",
                                                            "numbers")):
                    docs[i] = fresh
                    fresh_docs.append(fresh)
                    flush()
        flush(final=True)
        docs.sort(key=lambda d: d["run_id"], reverse=True)
        return docs

    def _read_all(self) -> list[dict]:
        """Every document, parsed straight from the file under a shared lock (TinyDB writes it;
        wrapping 10,000 documents in TinyDB objects just to read them costs more than parsing)."""
        with self._shared():
            data = AtomicJSONStorage(str(self.path)).read() or {}
        return list(data.get("_default", {}).values())

    def stored(self) -> list[dict]:
        """Every document as the index last stored it, not reconciled with the run folders (`read`
        does that, with a look at every folder): what a long history shows first, while it is read."""
        return self._read_all()

    def listing_json(self) -> str | None:
        """The whole index as `ls --json` prints it, if nothing has changed behind the index's back;
        None when it may be stale (then `read()` reconciles and rewrites it)."""
        with self._shared():
            try:
                meta = json.loads((self.home / "runs.listing.meta").read_text())
                text = (self.home / "runs.listing.json").read_text()
            except (OSError, ValueError):
                return None
        folder = runs_dir(self.home)
        if meta.get("folders") != (len(os.listdir(folder)) if folder.is_dir() else 0) or \
                meta.get("numbers") != NUMBERS:
            return None
        watch = meta.get("watch", {})
        for run_id, (status, epoch, seen) in watch.items():
            run_dir = folder / run_id
            if status == "lost":
                if _changed_since(run_dir, {"seen": seen}):
                    return None
                continue
            fresh = document_for(run_dir)
            if [fresh.get("status"), fresh.get("epoch"), fresh.get("seen")] != [status, epoch, seen]:
                return None
        # Finished runs change too (resumed from the app or the queue, evaluated, truncated).
        base = os.fspath(folder) + "/"
        for run_id, seen in meta.get("seen", {}).items():
            if run_id not in watch and _changed_since(base + run_id, {"seen": seen}):
                return None
        return text

    def reindex(self) -> tuple[int, int]:
        """Rebuild from the run folders; return (runs indexed, entries dropped for missing folders)."""
        docs = [document_for(d) for d in list_run_dirs(self.home)]
        with self.transaction() as db:
            before = len(db)
            db.truncate()
            db.insert_multiple(docs)
        return len(docs), max(0, before - len(docs))

    def names(self) -> dict[str, str] | None:
        """Run id -> name from the index, or None when it may not hold every run folder (more folders than entries:
        runs copied in, an index deleted): then names are read from the folders (fairtui.runs.home.named_runs)."""
        names = {d["run_id"]: d.get("name", d["run_id"]) for d in self._read_all()}
        folder = runs_dir(self.home)
        present = [n for n in os.listdir(folder) if not n.startswith(".")] if folder.is_dir() else []
        return names if not set(present) - set(names) else None


def _apply(db: TinyDB, put: list[dict], drop: list[str] = ()) -> None:
    """Put each of ``put`` in place of its run's entry, whole (an upsert would keep fields the new one
    left out), and drop the entries of ``drop``: one read and one write of the file, however many."""
    storage = db.storage
    data = storage.read() or {}
    table = data.setdefault("_default", {})
    ids = {d.get("run_id"): key for key, d in table.items()}
    next_id = max((int(k) for k in table), default=0) + 1
    for run_id in drop:
        table.pop(ids.pop(run_id, None), None)
    for doc in put:
        key = ids.get(doc["run_id"])
        if key is None:
            key = ids[doc["run_id"]] = str(next_id)
            next_id += 1
        table[key] = doc
    storage.write(data)
