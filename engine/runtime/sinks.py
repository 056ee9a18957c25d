"""Live dashboards (`train.log_to`): a :class:`engine.contract.sinks.Sink` fed the run's events as the
engine writes them, under a guard that makes a dashboard a mirror of the event stream, never the record,
and never a reason for a run to fail or to change.

The run's events are written first, as always; then rank 0 hands each on (an EventWriter listener).
Whatever a dashboard does (its package missing, no network, a bad project, an exception anywhere, a call
that hangs on a stuck service or file system), the engine logs one warning, stops mirroring to it, and
trains on. Every call into a sink runs on a helper thread and is waited for at most ``TIMEOUT_S`` seconds
(``FAIRTUI_DASHBOARD_TIMEOUT_S``, or the older ``FAIRTUI_WANDB_TIMEOUT_S``, in the environment); a call still
running then is abandoned (the thread is a daemon) and that sink is never called again in this run. The
random states of Python and NumPy are kept across every call, so a run mirrored or not gives the same
numbers.

The dashboards a profile may name are engine.contract.sinks.LIVE_SINKS (the profile schema takes its names).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import random
import threading
from pathlib import Path
from typing import Any

from engine.contract.sinks import LIVE_SINKS, Feed, Sink

log = logging.getLogger("engine")
TIMEOUT_S = 60.0


def timeout_s() -> float:
    for key in ("FAIRTUI_DASHBOARD_TIMEOUT_S", "FAIRTUI_WANDB_TIMEOUT_S"):
        if key in os.environ:
            try:
                return float(os.environ[key])
            except ValueError:
                pass
    return TIMEOUT_S


class Unanswered(Exception):
    """A call into a dashboard that did not return in time."""


def bounded(fn: Any, *args: Any, seconds: float) -> None:
    """``fn(*args)`` on a daemon thread, waited for ``seconds`` at most: its exception is raised here, and
    :class:`Unanswered` if it is still running then (left behind: it can hold nothing the run needs)."""
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            fn(*args)
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001: handed to the caller
            outcome.append(err)

    worker = threading.Thread(target=call, name="dashboard-mirror", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise Unanswered(f"did not answer within {seconds:g} s")
    if outcome and outcome[0] is not None:
        raise outcome[0]


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) < 300 else text[:297] + "..."


def run_meta(run_dir: Path) -> dict:
    """The run's name and tags as meta.json holds them when the session starts."""
    try:
        meta = json.loads((Path(run_dir) / "meta.json").read_text())
        return meta if isinstance(meta, dict) else {}
    except (OSError, ValueError):
        return {}


class LiveMirror:
    """One sink, fed each event the engine writes (call it with the event), under the guard above."""

    def __init__(self, name: str, sink: Sink, run_dir: Path, profile: Any):
        self.name, self.sink, self.run_dir, self.profile = name, sink, Path(run_dir), profile
        self.title = getattr(sink, "TITLE", name)
        self.feed: Feed | None = None
        self.off = False
        self.abandoned = False  # a call never returned: its thread may hold the interpreter's exit

    def __call__(self, event: dict) -> None:
        if self.off or not event:
            return
        if self.feed is None:
            meta = run_meta(self.run_dir)
            self.feed = Feed(self.sink, self.run_dir.name, meta.get("name") or self.profile.name,
                             [str(t) for t in meta.get("tags") or []], self.profile.to_table())
        self._guarded(self.feed, event)

    def close(self) -> None:
        """The session is over: a sink still open is closed (no `run_finished` reached it)."""
        if self.feed is not None and not self.off:
            self._guarded(self.feed.end)

    def _guarded(self, fn: Any, *args: Any) -> None:
        import numpy as np

        py_state, np_state = random.getstate(), np.random.get_state()
        try:
            bounded(fn, *args, seconds=timeout_s())
        except Exception as err:  # noqa: BLE001: a dashboard never fails a run
            self.off = True
            self.abandoned = isinstance(err, Unanswered)
            reason = f"{self.title} {err}" if self.abandoned else _one_line(err)
            log.warning("train.log_to %s: %s; the run goes on without %s (its run folder is the record)",
                        self.name, reason, self.title)
            if self.feed is not None and self.feed.opened and not self.abandoned:  # a hung one is not called again
                try:
                    bounded(self.sink.close, None, seconds=timeout_s())
                except Exception:  # noqa: BLE001
                    pass
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def live_mirrors(run_dir: Path, profile: Any) -> list[LiveMirror]:
    """A mirror for each dashboard in ``train.log_to``, in its order."""
    mirrors = []
    for name in profile.train.log_to:
        module, cls = LIVE_SINKS[name].split(":")
        sink = getattr(importlib.import_module(module), cls)(Path(run_dir), profile)
        mirrors.append(LiveMirror(name, sink, run_dir, profile))
    return mirrors
