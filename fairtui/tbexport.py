"""`fairtui export RUN... --format tensorboard -o DIR`: TensorBoard event files from runs' event streams, so
that fairtui's runs sit beside a researcher's others in TensorBoard. A bridge, not a record: the run
folder stays the source of truth, and nothing here is needed to run.

It uses only the `tensorboard` package's protocol buffers and event-file writer (the extra
``fairtui[tensorboard]``): no TensorFlow, no torch. One folder per run, ``DIR/<name>-<run_id>/``, with:

- every epoch (step = epoch, wall time = the epoch's own): ``val/robust_per_class/<k>_<class>``,
  ``val/clean_per_class/...``, the validation summary ``val/robust_avg``, ``val/robust_worst``,
  ``val/robust_worst20``, ``val/robust_cv``, ``val/robust_mcd``, ``val/clean_avg``; ``train/loss``,
  ``train/clean_acc``, ``train/robust_acc``, ``train/lr``, ``train/epoch_time_s``; the method's class-wise
  state ``state/<key>/<k>_<class>`` and its single numbers ``state/<key>``;
- the headline test results (the profile's own settings on the whole split, as every table picks them),
  at the epoch of their checkpoint: ``test/<checkpoint>/<attack>/robust_per_class/<k>_<class>``, the
  clean ones, ``avg_robust``, ``worst_robust``, ``worst20_robust``, ``avg_clean``, ``cv``, ``mcd``;
- the resolved profile as hparams (flattened keys) and as text, and each result's settings as text
  (``settings/<checkpoint>/<attack>``: "pgd20, eps 0.0314, whole split").
"""

from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path

from engine import metrics
from fairtui.compare import flatten, setting_label, summarise
from fairtui.runfolder import RunView

EXTRA = "pip install 'fairtui[tensorboard]'"


class TensorBoardError(ValueError):
    """An export that cannot be written; the message says why in one line."""


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def class_tags(names: list[str]) -> list[str]:
    """``03_cat``: the index keeps TensorBoard's order the class order."""
    width = len(str(max(len(names) - 1, 0)))
    return [f"{i:0{width}d}_{_safe(n)}" for i, n in enumerate(names)]


def run_scalars(view: RunView) -> list[tuple[int, float, dict[str, float]]]:
    """(step, wall time, {tag: value}) for every epoch and, at the end, the headline test results."""
    names = view.class_names()
    tags = class_tags(names)
    out = []
    last_epoch, last_t = 0, 0.0
    for e in view.epochs:
        values: dict[str, float] = {}
        val, train = e.get("val") or {}, e.get("train") or {}
        for kind in ("robust", "clean"):
            per_class = val.get(f"{kind}_acc_per_class") or []
            values.update({f"val/{kind}_per_class/{t}": v for t, v in zip(tags, per_class) if v is not None})
        robust = val.get("robust_acc_per_class") or []
        if robust:
            s = metrics.summary(robust)
            values.update({f"val/robust_{k}": s[k] for k in ("avg", "worst", "worst20", "cv", "mcd")})
        if val.get("clean_acc_per_class"):
            values["val/clean_avg"] = metrics.average(val["clean_acc_per_class"])
        for key in ("loss", "clean_acc", "robust_acc"):
            if isinstance(train.get(key), (int, float)):
                values[f"train/{key}"] = train[key]
        for key, name in (("lr", "train/lr"), ("time_s", "train/epoch_time_s")):
            if isinstance(e.get(key), (int, float)):
                values[name] = e[key]
        values.update(state_scalars(e.get("method_state") or {}, tags))
        last_epoch, last_t = e["epoch"], float(e.get("t", 0.0))
        out.append((e["epoch"], last_t, {k: float(v) for k, v in values.items() if _finite(v)}))
    for (split, ckpt, attack), r in view.results().items():
        prefix = f"{split}/{_safe(ckpt)}/{_safe(attack)}"
        values = {}
        for kind in ("robust", "clean"):
            values.update({f"{prefix}/{kind}_per_class/{t}": v
                           for t, v in zip(tags, r.get(f"{kind}_acc_per_class") or []) if v is not None})
        if attack == "clean":  # no attack: only the clean numbers mean something
            values = {k: v for k, v in values.items() if "/clean_per_class/" in k}
            values[f"{prefix}/avg_clean"] = metrics.average(r["clean_acc_per_class"])
        else:
            values.update({f"{prefix}/{k}": v for k, v in summarise(r).items()})
        step = int(r.get("epoch") or last_epoch)
        out.append((step, float(r.get("t", last_t)), {k: float(v) for k, v in values.items() if _finite(v)}))
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(float(v))


def state_scalars(state: dict, tags: list[str]) -> dict[str, float]:
    """A method_state as scalars: per-class lists (K, or K + 1 with 'overall' first for WAT) and single
    numbers or flags; matrices (DAFA's P) are not scalars and stay in the run folder."""
    out: dict[str, float] = {}
    k = len(tags)
    for key, value in state.items():
        if isinstance(value, (int, float)):  # a bool too (CFA's fawa_accepted): 0 or 1
            out[f"state/{key}"] = float(value)
        elif isinstance(value, list) and len(value) in (k, k + 1) and \
                all(v is None or isinstance(v, (int, float)) for v in value):
            labels = tags if len(value) == k else ["overall"] + tags
            out.update({f"state/{key}/{t}": v for t, v in zip(labels, value) if v is not None})
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
        for (split, ckpt, attack), r in view.results().items():
            writer.add_event(Event(wall_time=t0, step=0, summary=text.text_pb(
                f"settings/{split}/{_safe(ckpt)}/{_safe(attack)}", f"{setting_label(r)} @ {ckpt}")))
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
    out_dir = out_dir.expanduser()
    resolved, home_dir = out_dir.resolve(), home.expanduser().resolve()
    if resolved == home_dir or home_dir in resolved.parents:
        raise TensorBoardError(f"-o {out_dir}: inside the fairtui home {home_dir}, where the runs' own files live; "
                               "write it elsewhere")
    if resolved.exists() and not resolved.is_dir():
        raise TensorBoardError(f"-o {out_dir}: a file; a TensorBoard export is a folder (a log dir)")
    targets = [(v, resolved / f"{_safe(v.name)}-{v.run_id}") for v in views]
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
