"""`fairtui export RUN... --format tensorboard -o DIR`: TensorBoard event files from runs' event streams, so
that fairtui's runs sit beside a researcher's others in TensorBoard. A bridge, not a record: the run
folder stays the source of truth, and nothing here is needed to run.

It uses only the `tensorboard` package's protocol buffers and event-file writer (the extra
``fairtui[tensorboard]``): no TensorFlow, no torch. One folder per run, ``DIR/<name>-<run_id>/``, with:

- every epoch's numbers (step = epoch, wall time = the epoch's own) and, at the epoch of their
  checkpoint, the headline test results (the profile's own settings on the whole split, as every table
  picks them), named as :mod:`engine.contract.scalars` names them for every dashboard: per-class validation
  accuracy, its summary, the loss and lr, the method's class-wise state, ``test/<checkpoint>/<attack>/...``;
- the resolved profile as hparams (flattened keys) and as text, and each result's settings as text
  (``settings/test/<checkpoint>/<attack>``: "pgd20, eps 0.0314, whole split @ best").
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from engine.contract.scalars import safe_name
from engine.contract.sinks import Feed, RunInfo, Sink
from fairtui.judge.compare import flatten
from fairtui.judge.export import OutputError, outside_home
from fairtui.runs.runfolder import RunView

EXTRA = "pip install 'fairtui[tensorboard]'"


class TensorBoardError(OutputError):
    """An export that cannot be written; the message says why in one line."""


class TensorBoardSink:
    """A run's numbers as one TensorBoard event file (engine.contract.sinks.Sink): fed by :class:`Feed` from
    the run folder, as the engine feeds W&B live."""

    def __init__(self, folder: Path, profile_text: str):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.writer = EventFileWriter(str(folder))
        self.profile_text = profile_text
        self.t0, self.run_id, self.params = 0.0, "", {}
        self.result_tags: set[str] = set()

    def _add(self, wall_time: float, step: int, summary) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.writer.add_event(Event(wall_time=wall_time, step=step, summary=summary))

    def open(self, run: RunInfo) -> None:
        from tensorboard.plugins.hparams import summary_v2 as hp
        from tensorboard.plugins.text import summary_v2 as text

        self.t0, self.run_id, self.params = run.t, run.run_id, hparams(run.config)
        self._add(self.t0, 0, hp.hparams_pb(self.params, trial_id=run.run_id, start_time_secs=self.t0))
        self._add(self.t0, 0, text.text_pb("profile", f"```\n{self.profile_text}\n```"))

    def epoch(self, step: int, wall_time: float, scalars: dict[str, float]) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._add(wall_time or self.t0, step,
                  Summary(value=[Summary.Value(tag=tag, simple_value=v) for tag, v in sorted(scalars.items())]))

    def result(self, step: int, wall_time: float, key: str, label: str, scalars: dict[str, float]) -> None:
        from tensorboard.plugins.text import summary_v2 as text

        self._add(self.t0, 0, text.text_pb(f"settings/{key}", label))
        self.result_tags.update(k for k in scalars if k.rsplit("/", 1)[-1] in ("avg_robust", "worst_robust"))
        self.epoch(step, wall_time, scalars)

    def close(self, status: str | None) -> None:
        from tensorboard.plugins.hparams import summary_v2 as hp

        # the experiment's config names the results as metrics: known once every result has been seen
        self._add(self.t0, 0, hp.hparams_config_pb(hparams=[hp.HParam(k) for k in self.params],
                                                   metrics=[hp.Metric(t) for t in sorted(self.result_tags)]))


def hparams(config: dict) -> dict[str, object]:
    """The resolved profile, flattened to TensorBoard's hparam types (lists as text)."""
    out: dict[str, object] = {}
    for key, value in flatten(config).items():
        if isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif value is not None:
            out[key] = str(value)
    return out


def write_run(view: RunView, folder: Path) -> None:
    """One run's event file in ``folder`` (which exists and is empty): its epochs, then its headline results,
    through the one feed every dashboard shares."""
    profile = (view.run_dir / "profile.toml").read_text() if (view.run_dir / "profile.toml").exists() else ""
    sink = TensorBoardSink(folder, profile)
    try:
        feed_run(view, sink)
    finally:
        sink.writer.close()


def feed_run(view: RunView, sink: Sink) -> None:
    """A finished run's numbers from its folder into ``sink``: the calls the engine's live feed made, with
    each epoch and each headline result once (the latest), closed with the session's status."""
    feed = Feed(sink, view.run_id, view.name, view.meta.get("tags", []), view.config)
    started = dict(view.started or {"type": "run_started", "t": 0.0})
    started.setdefault("class_names", view.class_names())
    feed(started)
    for event in view.epochs:
        feed(event)
    for result in view.results().values():
        feed(result)
    if view.finished is not None:
        feed({"type": "run_finished", "status": view.finished.get("status")})
    feed.end()


def export(views: list[RunView], out_dir: Path, home: Path, force: bool = False) -> list[Path]:
    """Write each run's folder under ``out_dir`` (never inside the fairtui home); an existing run folder
    there is replaced only with ``force``. Each folder is written beside and renamed into place, so an
    interrupted export leaves no half-written run."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise TensorBoardError(f"a TensorBoard export needs the tensorboard package: {EXTRA}") from None
    resolved = outside_home(out_dir, home)
    if resolved.exists() and not resolved.is_dir():
        raise TensorBoardError(f"-o {out_dir}: a file; a TensorBoard export is a folder (a log dir)")
    targets = [(v, resolved / f"{safe_name(v.name)}-{v.run_id}") for v in views]
    clash = [t for _, t in targets if t.exists()]
    if clash and not force:
        raise TensorBoardError(f"-o {out_dir}: {clash[0].name} exists there; --force replaces it")
    try:
        resolved.mkdir(parents=True, exist_ok=True)
        written = []
        for view, target in targets:
            # an exclusive folder under an unpredictable name (mkdtemp): nothing planted beforehand is written into
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".fairtui-tmp", dir=resolved))
            os.chmod(tmp, 0o755)
            write_run(view, tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
            written.append(target)
    except OSError as err:
        raise TensorBoardError(f"-o {out_dir}: not written: {err.strerror or err}") from None
    return written
