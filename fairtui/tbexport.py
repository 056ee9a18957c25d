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
from pathlib import Path

from engine.contract.scalars import epoch_scalars, result_prefix, result_scalars, safe_name
from fairtui.compare import flatten, setting_label
from fairtui.export import OutputError, outside_home
from fairtui.runfolder import RunView

EXTRA = "pip install 'fairtui[tensorboard]'"


class TensorBoardError(OutputError):
    """An export that cannot be written; the message says why in one line."""


def run_scalars(view: RunView) -> list[tuple[int, float, dict[str, float]]]:
    """(step, wall time, {tag: value}) for every epoch and, at the end, the headline test results (at the
    epoch of their checkpoint)."""
    names = view.class_names()
    out = [(e["epoch"], float(e.get("t", 0.0)), epoch_scalars(e, names)) for e in view.epochs]
    last_epoch, last_t = (out[-1][0], out[-1][1]) if out else (0, 0.0)
    for r in view.results().values():
        out.append((int(r.get("epoch") or last_epoch), float(r.get("t", last_t)), result_scalars(r, names)))
    return out


def hparams(view: RunView) -> dict[str, object]:
    """The resolved profile, flattened to TensorBoard's hparam types (lists as text)."""
    out: dict[str, object] = {}
    for key, value in flatten(view.config).items():
        if isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif value is not None:
            out[key] = str(value)
    return out


def write_run(view: RunView, folder: Path) -> None:
    """One run's event file in ``folder`` (which exists and is empty)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.plugins.text import summary_v2 as text
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    try:
        scalars = run_scalars(view)
        t0 = float((view.started or {}).get("t", scalars[0][1] if scalars else 0.0))
        params = hparams(view)
        result_tags = sorted({k for _, _, vals in scalars for k in vals
                              if k.startswith("test/") and k.rsplit("/", 1)[-1] in ("avg_robust", "worst_robust")})
        config = hp.hparams_config_pb(hparams=[hp.HParam(k) for k in params],
                                      metrics=[hp.Metric(t) for t in result_tags])
        writer.add_event(Event(wall_time=t0, step=0, summary=config))
        writer.add_event(Event(wall_time=t0, step=0, summary=hp.hparams_pb(params, trial_id=view.run_id,
                                                                            start_time_secs=t0)))
        profile = (view.run_dir / "profile.toml").read_text() if (view.run_dir / "profile.toml").exists() else ""
        writer.add_event(Event(wall_time=t0, step=0, summary=text.text_pb("profile", f"```\n{profile}\n```")))
        for r in view.results().values():
            writer.add_event(Event(wall_time=t0, step=0, summary=text.text_pb(
                f"settings/{result_prefix(r)}", f"{setting_label(r)} @ {r.get('checkpoint')}")))
        for step, wall, values in scalars:
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=v) for tag, v in sorted(values.items())])
            writer.add_event(Event(wall_time=wall or t0, step=step, summary=summary))
    finally:
        writer.close()


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
            tmp = target.with_name(f".{target.name}.fairtui-tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            write_run(view, tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
            written.append(target)
    except OSError as err:
        raise TensorBoardError(f"-o {out_dir}: not written: {err.strerror or err}") from None
    return written
