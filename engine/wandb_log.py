"""Each epoch's numbers also in Weights & Biases (`train.log_to = ["wandb"]`): a mirror of the event
stream, never the record, and never a reason for a run to fail or to change.

The run's events are written first, as always; then rank 0 hands them on: `run_started` /
`run_resumed` start the W&B run (id = the run id, so a resumed run continues the same W&B run; the
run's name and tags, and the resolved profile as its config), each `epoch_end` is logged at
step = epoch under :mod:`engine.contract.scalars`' names, each headline `eval_result` goes into the run's
summary with its settings, `run_finished` finishes it (exit code 0 when completed). The mode is
`train.wandb_mode`, "offline" by default (these machines often have no network): the files are in
``RUN_DIR/wandb/offline-run-*``, for `wandb sync` later.

Whatever W&B does (not installed, no network, a bad project, an exception anywhere, a call that
hangs on a stuck service or file system), the engine logs one warning, stops mirroring, and trains
on. Every call into wandb runs on a helper thread and is waited for at most ``TIMEOUT_S`` seconds
(``FAIRTUI_WANDB_TIMEOUT_S`` in the environment); a call still running then is abandoned (the thread
is a daemon) and W&B is never called again in this run. The random states of Python and NumPy are
kept across every W&B call, so a run mirrored or not gives the same numbers.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from pathlib import Path
from typing import Any

from engine.contract.results import describe, is_headline
from engine.contract.scalars import epoch_scalars, result_prefix, result_scalars

log = logging.getLogger("engine")
EXTRA = "pip install 'fairtui[wandb]'"
TIMEOUT_S = 60.0


def timeout_s() -> float:
    try:
        return float(os.environ.get("FAIRTUI_WANDB_TIMEOUT_S", TIMEOUT_S))
    except ValueError:
        return TIMEOUT_S


class Unanswered(Exception):
    """A call into wandb that did not return in time."""


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

    worker = threading.Thread(target=call, name="wandb-mirror", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise Unanswered(f"W&B did not answer within {seconds:g} s")
    if outcome and outcome[0] is not None:
        raise outcome[0]


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) < 300 else text[:297] + "..."


class WandbMirror:
    """An event writer that also mirrors what it writes to W&B; everything else is the wrapped writer's."""

    def __init__(self, events: Any, run_dir: Path, profile: Any):
        self.events, self.run_dir, self.profile = events, Path(run_dir), profile
        self.config = profile.to_table()
        self.run: Any = None
        self.off = False
        self.abandoned = False  # a call never returned: its thread may hold the interpreter's exit
        self.names: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.events, name)

    def emit(self, type_: str, **payload: Any) -> dict:
        event = self.events.emit(type_, **payload)  # the record first
        if not self.off:
            self._guarded(self._mirror, event)
        return event

    def close(self) -> None:
        if self.run is not None and not self.off:
            self._guarded(self._finish, 1)  # no run_finished reached W&B: the engine ended another way
        self.events.close()

    # -- W&B ----------------------------------------------------------------------------------------
    def _guarded(self, fn: Any, *args: Any) -> None:
        import numpy as np

        py_state, np_state = random.getstate(), np.random.get_state()
        try:
            bounded(fn, *args, seconds=timeout_s())
        except Exception as err:  # noqa: BLE001: W&B never fails a run
            self.off = True
            self.abandoned = isinstance(err, Unanswered)
            log.warning("train.log_to wandb: %s; the run goes on without W&B (its run folder is the record)",
                        _one_line(err))
            if self.run is not None and not isinstance(err, Unanswered):  # a hung W&B is not called again
                try:
                    bounded(self.run.finish, 1, seconds=timeout_s())
                except Exception:  # noqa: BLE001
                    pass
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)

    def _mirror(self, event: dict) -> None:
        kind = event.get("type")
        if kind in ("run_started", "run_resumed"):
            self.names = list(event.get("class_names") or self.names)
            if self.run is None:
                self._start()
            return
        if self.run is None:
            return
        if kind == "epoch_end":
            self.run.log(epoch_scalars(event, self.names), step=int(event["epoch"]))
        elif kind == "eval_result" and is_headline(event, self.config):
            summary = result_scalars(event, self.names)
            summary[f"settings/{result_prefix(event)}"] = f"{event.get('attack')}, {describe(event)} @ " \
                                                           f"{event.get('checkpoint')}"
            self.run.summary.update(summary)
        elif kind == "run_finished":
            self._finish(0 if event.get("status") == "completed" else 1)

    def _start(self) -> None:
        try:
            import wandb
        except ImportError:
            raise RuntimeError(f"the wandb package is not installed ({EXTRA})") from None
        train = self.profile.train
        meta = self._meta()
        self.run = wandb.init(
            project=train.wandb_project, entity=train.wandb_entity or None, mode=train.wandb_mode,
            id=self.run_dir.name, resume="allow", name=meta.get("name") or self.profile.name,
            tags=[str(t)[:64] for t in meta.get("tags") or []], config=self.config, dir=str(self.run_dir),
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                                    save_code=False, init_timeout=60))
        log.info("train.log_to wandb: %s run %s (project %s)", train.wandb_mode, self.run_dir.name,
                 train.wandb_project)

    def _finish(self, exit_code: int) -> None:
        run, self.run, self.off = self.run, None, True
        if run is not None:
            run.finish(exit_code=exit_code)

    def _meta(self) -> dict:
        try:
            meta = json.loads((self.run_dir / "meta.json").read_text())
            return meta if isinstance(meta, dict) else {}
        except (OSError, ValueError):
            return {}


def mirrored(events: Any, run_dir: Path, profile: Any) -> Any:
    """``events``, mirrored to each dashboard in ``train.log_to`` (today: wandb)."""
    return WandbMirror(events, run_dir, profile) if "wandb" in profile.train.log_to else events
