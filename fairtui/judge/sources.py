"""Where a comparison's runs come from and how they form groups: the run folders of a ``--results`` folder, the
groups of ``--by`` (a profile's configurations, a name less its seed suffix, a tag, a sweep)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from fairtui.judge.compare import CompareError
from fairtui.runs.configurations import by_configuration
from fairtui.runs.runfolder import RunView

BY = ("profile", "name", "tag", "sweep")
SEED_SUFFIX = re.compile(r"-s(?:eed)?\d+$")


RUN_FILES = ("events.jsonl", "profile.toml", "meta.json")
USABLE = ("completed", "imported")


def results_runs(folder: Path) -> list[Path]:
    """The run folders of a results folder: ``<profile>/<run-id>/`` (or ``<run-id>/``) holding events.jsonl and
    profile.toml. A folder that does not exist is an error, not an empty table."""
    return results_scan(folder)[0]


def results_scan(folder: Path) -> tuple[list[Path], list[str]]:
    """The run folders of a results folder (:func:`results_runs`), and a line for each folder that holds some of a
    run's files but not the two a run is read from: named, never dropped unsaid."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CompareError(f"--results {folder}: no such folder (it should hold <profile>/<run-id>/ folders with "
                           "events.jsonl, profile.toml and meta.json)")
    found, unusable = [], []
    for candidate in sorted([folder, *folder.iterdir(), *(p for d in folder.iterdir() if d.is_dir()
                                                          for p in d.iterdir())]):
        if not candidate.is_dir():
            continue
        held = [f for f in RUN_FILES if (candidate / f).is_file()]
        if "events.jsonl" in held and "profile.toml" in held:
            found.append(candidate)
        elif any((candidate / f).exists() for f in RUN_FILES):
            missing = [f for f in RUN_FILES[:2] if f not in held]
            unusable.append(f"{candidate}: no readable {' or '.join(missing)} (a run folder holds events.jsonl, "
                            "profile.toml and meta.json)")
    return found, unusable


def read_results(folders: list[Path]) -> tuple[list[RunView], list[str]]:
    """Every run of these folders of committed run files, and a line for each folder holding part of a run
    (:func:`results_scan`; CompareError for a folder that does not exist)."""
    views, unusable = [], []
    for folder in folders:
        found, bad = results_scan(folder)
        views += [RunView.load(d) for d in found]
        unusable += bad
    return views, unusable


def unusable_reason(view: RunView) -> str | None:
    """Why a committed run has no result to give, or None when it has one: an empty or cut stream, a run that
    ended other than completed."""
    status = view.status()
    if status in USABLE:
        return None
    stream = view.run_dir / "events.jsonl"
    size = stream.stat().st_size if stream.is_file() else 0
    unreadable = sum("unreadable event" in w for w in view.warnings)
    bad = f", {unreadable} unreadable line{'s' if unreadable > 1 else ''}" if unreadable else ""
    if size == 0:
        why = "its events.jsonl is empty"
    elif view.finished is None:
        why = f"its events.jsonl ends before the run did (no run_end in {size} bytes{bad}: cut, or copied while it trained)"
    else:
        why = f"it ended {status}{bad}"
    return f"{view.name} [{view.run_id}] in {view.run_dir.parent}: {why}"


def grouped(views: list[RunView], by: str) -> dict[str, list[RunView]]:
    """label -> runs under ``--by``: each configuration of a profile (:func:`fairtui.runs.configurations.by_configuration`:
    a profile's runs with other settings, ``--set train.lr=...``, are a group of their own, labelled by what
    differs), the name less a trailing -s<seed>, each tag, or the sweep."""
    if by == "profile":
        return dict(by_configuration(views))
    out: dict[str, list[RunView]] = {}
    for view in views:
        for key in group_keys(view, by):
            out.setdefault(key, []).append(view)
    return out


def group_keys(view: RunView, by: str) -> list[str]:
    """The groups a run joins under ``--by`` other than profile (:func:`grouped`): its name less a trailing
    -s<seed>, each of its tags, or its sweep."""
    if by == "name":
        return [SEED_SUFFIX.sub("", view.name)]
    if by == "tag":
        return list(view.meta.get("tags") or [])
    if by == "sweep":
        return [view.meta["sweep"]] if view.meta.get("sweep") else []
    raise CompareError(f"--by must be one of {', '.join(BY)}, got {by!r}")


def non_finite(result: dict) -> str | None:
    """"robust accuracy of class 3 is nan" for a result holding a NaN or infinite class accuracy, else None."""
    for key, what in (("robust_acc_per_class", "robust"), ("clean_acc_per_class", "clean")):
        for c, value in enumerate(result.get(key) or []):
            if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value)):
                return f"{what} accuracy of class {c} is {value}"
    return None
