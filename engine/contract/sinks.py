"""Dashboards: where a run's numbers go besides its run folder, through one interface. Torch-free.

A dashboard is a :class:`Sink`: four calls that take a run's numbers as :mod:`engine.contract.scalars`
names them. :class:`Feed` is the one translation from a run's events to those calls, the same whether
the events arrive as the engine writes them or are read back from a run folder, so that every dashboard
shows the same scalars under the same names, at the same steps, with the same result labels:

- ``open(run)``: the run starts or resumes (:class:`RunInfo`: id, name, tags, resolved profile, class names);
- ``epoch(step, wall_time, scalars)``: an `epoch_end` (step = the epoch);
- ``result(step, wall_time, key, label, scalars)``: a headline `eval_result` (the profile's own settings on
  the whole split), at the epoch of its checkpoint; ``key`` is ``<split>/<checkpoint>/<attack>`` and
  ``label`` what it is ("pgd20, eps 0.0314, whole split @ best");
- ``close(status)``: the session's `run_finished` status, or None when it ended without one.

Two sinks today: W&B, live from the engine (`engine/runtime/wandb_log.py`, `train.log_to = ["wandb"]`, under the
guard of `engine/runtime/sinks.py`: a dashboard never fails or changes a run), and TensorBoard, from a run folder
by the app (`fairtui/judge/tbexport.py`, `fairtui export --format tensorboard`). Where a third goes:
docs/development.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.contract.results import describe, is_headline
from engine.contract.scalars import epoch_scalars, result_prefix, result_scalars


# The live dashboards a profile's `train.log_to` may name: name -> "module:class" of its sink, built by the
# engine as cls(run_dir, profile) (engine/runtime/sinks.py).
LIVE_SINKS = {"wandb": "engine.runtime.wandb_log:WandbSink"}


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    name: str
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)  # the resolved profile, as a table
    class_names: tuple[str, ...] = ()
    t: float = 0.0  # when the session started
    resumed: bool = False


class Sink(Protocol):
    def open(self, run: RunInfo) -> None: ...

    def epoch(self, step: int, wall_time: float, scalars: dict[str, float]) -> None: ...

    def result(self, step: int, wall_time: float, key: str, label: str, scalars: dict[str, float]) -> None: ...

    def close(self, status: str | None) -> None: ...


def result_label(event: dict) -> str:
    """What a result is: "pgd20, eps 0.0314, whole split @ best"."""
    return f"{event.get('attack')}, {describe(event)} @ {event.get('checkpoint')}"


class Feed:
    """One run's events, in the order written, as one sink's calls. Events before the first `run_started`
    or `run_resumed` (there are none in a stream) and results that are not headline are not passed on."""

    def __init__(self, sink: Sink, run_id: str, name: str, tags: list[str] | tuple[str, ...], config: dict):
        self.sink, self.run_id, self.name, self.tags, self.config = sink, run_id, name, tuple(tags), config
        self.names: list[str] = []
        self.opened = False
        self.step = 0

    def __call__(self, event: dict) -> None:
        kind = event.get("type")
        if kind in ("run_started", "run_resumed"):
            self.names = list(event.get("class_names") or self.names)
            if not self.opened:
                self.opened = True
                self.sink.open(RunInfo(self.run_id, self.name, self.tags, self.config, tuple(self.names),
                                       float(event.get("t", 0.0)), kind == "run_resumed"))
            return
        if not self.opened:
            return
        if kind == "epoch_end":
            self.step = int(event["epoch"])
            self.sink.epoch(self.step, float(event.get("t", 0.0)), epoch_scalars(event, self.names))
        elif kind == "eval_result" and is_headline(event, self.config):
            self.sink.result(int(event.get("epoch") or self.step), float(event.get("t", 0.0)), result_prefix(event),
                             result_label(event), result_scalars(event, self.names))
        elif kind == "run_finished":
            self.opened = False
            self.sink.close(str(event.get("status")))

    def end(self) -> None:
        """The session is over: a sink still open is closed without a status (no `run_finished` came)."""
        if self.opened:
            self.opened = False
            self.sink.close(None)
