"""The home folder: ``--home``, else ``$FAIRTUI_HOME``, else ``./.fairtui``; runs live in ``runs/<id>/``."""

from __future__ import annotations

import difflib
import os
import secrets
import time
from pathlib import Path


class ReadOnlyHome(OSError):
    """The home folder cannot be written (a read-only mount, no permission): reading still works."""

    def __init__(self, home: Path, err: OSError):
        super().__init__(err.errno, f"cannot write to {home}: {err.strerror or err} (the home folder is "
                                    "read-only; reading commands such as ls, show, compare and export still work)")


class EngineRunning(RuntimeError):
    """A training engine already runs for this run folder (it holds ``engine.lock``)."""


class RunNotFound(LookupError):
    """An unknown or ambiguous RUN; the message suggests what exists."""


class HomeNotAFolder(ValueError):
    """``--home`` (or $FAIRTUI_HOME) names something that is not a folder: one line, exit 2."""


def resolve_home(home: str | Path | None = None) -> Path:
    env = os.environ.get("FAIRTUI_HOME")
    where = "--home" if home else "$FAIRTUI_HOME"
    path = Path(home).expanduser() if home else Path(env).expanduser() if env else Path.cwd() / ".fairtui"
    if path.exists() and not path.is_dir():
        raise HomeNotAFolder(f"{where} {path}: not a folder (the home holds runs/, studies/ and the index; give a "
                             "folder, new or existing)")
    return path


def runs_dir(home: Path) -> Path:
    return home / "runs"


def new_run_id() -> str:
    """Sortable by creation time, unique without coordination: 20261122-021530-3fa9c1."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def list_run_dirs(home: Path) -> list[Path]:
    folder = runs_dir(home)
    if not folder.is_dir():
        return []
    # a hidden folder is a run being made (launcher.create_run's staging), not a run
    return sorted((p for p in folder.iterdir() if not p.name.startswith(".") and (p / "profile.toml").exists()),
                  key=lambda p: p.name)


def find_run(home: Path, ref: str, names: dict[str, str] | None = None, unique_name: bool = False) -> Path:
    """Resolve RUN: an id, a unique id prefix, a run name (newest run of that name), or a short id.

    ``unique_name``: a name that several runs share is refused, listing them, instead of meaning the newest
    (where picking the wrong one would change a result: the weights a fine-tune starts from).

    The short id is the random last part of the id (``1eb6cc`` of ``20261122-224326-1eb6cc``): what
    `fairtui ls`, `compare` and the app show. A unique prefix of it (4 characters or more) works too.
    """
    if not ref or not ref.strip() or ref.strip() in (".", ".."):
        # an empty prefix would match every run (`fairtui rm "" --yes` deleted one)
        raise RunNotFound(f"RUN must be a run id, a unique prefix of one, or a run name; got {ref!r}")
    folder = runs_dir(home)
    if ref and "/" not in ref and (folder / ref / "profile.toml").exists():
        return folder / ref
    ids = {name: folder / name for name in sorted(os.listdir(folder))} if folder.is_dir() else {}
    dirs = list(ids.values())
    short = [p for p in dirs if short_id(p.name) == ref and (p / "profile.toml").exists()]
    if len(short) == 1:
        return short[0]
    prefixed = [p for p in dirs if p.name.startswith(ref) and (p / "profile.toml").exists()]
    if len(prefixed) == 1:
        return prefixed[0]
    if len(prefixed) > 1:
        raise RunNotFound(f"{ref!r} is ambiguous; it starts {len(prefixed)} runs: "
                          + ", ".join(p.name for p in prefixed[:10]))
    dirs = [p for p in dirs if (p / "profile.toml").exists()]
    names = names if names is not None else {p.name: read_name(p) for p in dirs}
    named = named_runs(home, ref, names)
    if len(named) > 1 and unique_name:
        raise RunNotFound(f"{ref!r} names {len(named)} runs ({', '.join(p.name for p in named[:10])}): give one "
                          "by its id")
    if named:
        return named[-1]
    if len(ref) >= 4:
        by_short = [p for p in dirs if short_id(p.name).startswith(ref)]
        if len(by_short) == 1:
            return by_short[0]
        if len(by_short) > 1:
            raise RunNotFound(f"{ref!r} is ambiguous; it starts the short ids of {len(by_short)} runs: "
                              + ", ".join(p.name for p in by_short[:10]))
    close = difflib.get_close_matches(ref, list(ids) + sorted(set(names.values())), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise RunNotFound(f"no run {ref!r} in {runs_dir(home)}{hint}")


def named_runs(home: Path, name: str, names: dict[str, str] | None = None) -> list[Path]:
    """The run folders named ``name``, oldest first (ids sort by time). ``names``: id -> name, where the caller has
    read them already (the index)."""
    folder = runs_dir(home)
    if not folder.is_dir():
        return []
    if names is None:
        names = {p.name: read_name(p) for p in folder.iterdir() if (p / "profile.toml").exists()}
    return [folder / i for i in sorted(names) if names[i] == name and (folder / i / "profile.toml").exists()]


def short_id(run_id: str) -> str:
    """The id's random last part: unique in practice, and short enough to show and type."""
    return run_id.rsplit("-", 1)[-1]


def read_name(run_dir: Path) -> str:
    import json

    try:
        return json.loads((run_dir / "meta.json").read_text()).get("name", run_dir.name)
    except (OSError, ValueError):
        return run_dir.name


def display_path(path: Path) -> str:
    """A folder as the app shows it: relative to the current folder when inside it, else with ~."""
    path = Path(path).expanduser().resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        pass
    try:
        return "~/" + str(path.relative_to(Path.home().resolve()))
    except ValueError:
        return str(path)
