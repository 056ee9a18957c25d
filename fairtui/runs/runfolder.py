"""Reading a run folder (the source of truth): metadata, events, status and results.

Plain Python, no Textual and no torch: the commands, the index and the app share it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.contract.procinfo import process_exited, process_start_time
from fairtui.runs.digest import CHUNK as DIGEST_CHUNK
from fairtui.runs.digest import Digest, read_digest

FINAL_STATUSES = ("completed", "failed", "stopped", "imported")
DONE_STATUSES = ("completed", "imported")  # runs with results: trained to the end, or imported
HEARTBEAT_S = 600.0  # a run on another host with no sign of life for this long is lost


class LineTail:
    """Follows a growing file: each call returns the complete lines added since the last."""

    CHUNK = DIGEST_CHUNK  # at most this much per call: a reader catching up on a long file stays bounded

    def __init__(self, path: Path, from_end: bool = False, offset: int = 0):
        self.path, self._partial = path, b""
        self.offset = path.stat().st_size if from_end and path.exists() else offset

    def new_lines(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(self.CHUNK)
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # a line still being written
        return lines


class EventTail(LineTail):
    """Follows a growing ``events.jsonl``: each call returns the events added since the last."""

    def read_new(self) -> list[dict]:
        out = []
        for line in self.new_lines():
            try:
                event = json.loads(line)
            except ValueError:
                print(f"warning: {self.path}: skipped an unreadable event line", file=sys.stderr)
                continue
            if isinstance(event, dict):
                out.append(event)
        return out


def headline_results(events: list[dict], config: dict) -> dict[tuple[str, str, str], dict]:
    """The latest headline `eval_result` per (split, checkpoint, attack): the one rule every reader uses."""
    from engine.contract.results import is_headline

    out = {}
    for e in events:
        if e.get("type") == "eval_result" and is_headline(e, config):
            out[(e.get("split", "test"), e.get("checkpoint", "last"), e.get("attack", "?"))] = e
    return out


def engine_process(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "engine.json").read_text())
    except (OSError, ValueError):
        return None


def process_alive(info: dict | None) -> bool:
    """True when the process an ``engine.json`` or ``progress.json`` names (``pid``, ``host``, and, when
    recorded, ``proc_start``) still runs on this host: not gone, not a zombie, not a reused pid."""
    if not info or info.get("host") != socket.gethostname():
        return False
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if process_exited(pid):  # a zombie: killed, not yet reaped
        return False
    return info.get("proc_start") is None or process_start_time(pid) == info.get("proc_start")


def engine_starting(run_dir: Path) -> bool:
    """True while an engine for this run holds its engine lock on this host: from before it exists (the
    launcher takes the lock and hands it down) until it exits; engine.json names it once it has started."""
    from engine.contract.locks import is_locked
    from engine.contract.protocol import ENGINE_LOCK

    return is_locked(run_dir / ENGINE_LOCK)


def engine_alive(run_dir: Path) -> bool:
    """True when the engine recorded in ``engine.json`` is alive on this host (pid and start time match), or
    an engine is starting for the run (:func:`engine_starting`)."""
    return process_alive(engine_process(run_dir)) or engine_starting(run_dir)


@dataclass
class RunView:
    """A run folder as its readers see it: meta.json and the folded event stream (fairtui.runs.digest), never
    the whole stream in memory."""

    run_dir: Path
    meta: dict[str, Any]
    digest: Digest = field(default_factory=Digest)

    @classmethod
    def load(cls, run_dir: Path, cancelled: Callable[[], bool] | None = None) -> "RunView":
        try:
            meta = json.loads((run_dir / "meta.json").read_text())
        except (OSError, ValueError):
            meta = {}
        return cls(run_dir, meta, read_digest(run_dir, cancelled))

    @property
    def warnings(self) -> list[str]:
        return self.digest.all_warnings()

    def full(self, event: dict) -> dict:
        """The whole of an event the digest keeps slim (its matrices left out: engine.contract.digest), read
        from its one line of the stream; the event itself when nothing was left out."""
        from engine.contract.digest import full_event

        return full_event(self.run_dir / "events.jsonl", event) if event.get("_at") else event

    def eval_results(self) -> list[dict]:
        """The latest `eval_result` of each identity (split, checkpoint, attack, setting), oldest first."""
        return self.digest.eval_results()

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def name(self) -> str:
        return self.meta.get("name") or self.run_id

    @property
    def started(self) -> dict | None:
        return self.digest.started

    @property
    def training_sessions(self) -> list[dict]:
        """The sessions that made the run's numbers, each with where it took the run up and what it ran on
        (engine.contract.digest.Digest.training_sessions)."""
        return self.digest.training_sessions()

    @property
    def imported(self) -> dict | None:
        """Where an imported model came from (`fairtui import`); None for a trained run."""
        return self.started.get("imported") if self.started else None

    @property
    def config(self) -> dict:
        if self.started:
            return self.started.get("config", {})
        try:
            from engine.contract.profile_io import read_toml

            return read_toml(self.run_dir / "profile.toml")
        except Exception:  # a broken profile leaves the view usable
            return {}

    @property
    def epochs(self) -> list[dict]:
        """The last `epoch_end` of each epoch, in order (a resume may repeat one). Reads every epoch: a
        reader that needs the latest alone asks :meth:`last_epochs`."""
        return self.digest.epoch_list()

    def last_epochs(self, n: int = 1) -> list[dict]:
        """The latest ``n`` epochs, oldest first (a long run's others stay unread)."""
        return self.digest.last_epochs(n)

    @property
    def last_epoch(self) -> dict | None:
        last = self.digest.last_epochs(1)
        return last[0] if last else None

    def epoch_times(self) -> list[float | None]:
        """Every epoch's seconds, in order."""
        return self.digest.epoch_times()

    @property
    def finished(self) -> dict | None:
        """The `run_finished` that closes the latest session, if any: the engine's, or the end recorded
        beside the stream when no engine could write it (a start Slurm refused, an engine killed:
        engine.contract.protocol.record_end)."""
        from engine.contract.protocol import read_end

        streamed = self.digest.finished
        if streamed is not None and streamed.get("status") == "completed":
            return streamed  # the engine completed the run: an end recorded late beside it (a `stop --now` that
            # raced with the last epoch) cannot undo that, and a completed run never starts another session
        return read_end(self.run_dir) or streamed

    def status(self) -> str:
        if engine_starting(self.run_dir):  # a training engine holds the run's lock: alive, or starting (a resume
            return "running"               # before its run_started, a new run before its engine.json)
        if self.finished is not None and not (self.run_dir / "queued").exists():
            status = self.finished.get("status", "failed")
            # an imported model (`fairtui import`): "completed" in its stream, told apart everywhere
            return "imported" if status == "completed" and self.imported is not None else status
        if (self.run_dir / "queued").exists():
            return "queued"
        info = engine_process(self.run_dir)
        if info and info.get("host") != socket.gethostname():
            # On another node (Slurm): alive while its heartbeat (progress.json, events) is fresh.
            return "running" if self.heartbeat_age() < HEARTBEAT_S else "lost"
        return "running" if process_alive(info) else "lost"

    def heartbeat_age(self) -> float:
        import time

        ages = [time.time() - (self.run_dir / f).stat().st_mtime for f in ("progress.json", "events.jsonl")
                if (self.run_dir / f).exists()]
        return min(ages, default=float("inf"))

    def class_names(self) -> list[str]:
        if self.started and self.started.get("class_names"):
            return list(self.started["class_names"])
        last = self.last_epoch
        k = len(last["val"]["robust_acc_per_class"]) if last else 0
        return [str(i) for i in range(k)]

    def results(self) -> dict[tuple[str, str, str], dict]:
        """The run's numbers: the latest headline `eval_result` (at the profile's own settings on the
        whole split, engine.contract.results) per (split, checkpoint, attack)."""
        return headline_results(self.eval_results(), self.config)

    def other_results(self) -> list[tuple[dict, list[str]]]:
        """Exploratory results (another eps, a subset, another batching...), each with what differs."""
        from engine.contract.results import differences, is_headline

        cfg = self.config
        return [(e, differences(e, cfg)) for e in self.eval_results() if not is_headline(e, cfg)]

    def checkpoint_names(self) -> list[str]:
        """The checkpoints this run can be evaluated at, from ``checkpoints/names.json`` (the engine writes it
        with each checkpoint): no torch, no checkpoint loaded. For a run from before that file, the
        checkpoint files there are (an EMA or averaged checkpoint is then found by the engine when named)."""
        folder = self.run_dir / "checkpoints"
        try:
            names = json.loads((folder / "names.json").read_text())["names"]
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                return names
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return [n for n in ("last", "best") if (folder / f"{n}.pt").exists()]

    def total_epochs(self) -> int:
        return int(self.config.get("train", {}).get("epochs", 0))

    def progress(self) -> dict | None:
        try:
            return json.loads((self.run_dir / "progress.json").read_text())
        except (OSError, ValueError):
            return None
