"""The code's version as a run or a bug report records it: the engine's version and the git commit of the checkout,
with whether it had uncommitted changes. No torch: the app's `fairtui --version` asks it too."""

from __future__ import annotations

import subprocess
from pathlib import Path


def code_version() -> dict[str, str | bool]:
    from engine import __version__

    out: dict[str, str | bool] = {"engine": __version__}
    here = Path(__file__).resolve().parents[1]  # engine/
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5)
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "."],
                                   capture_output=True, text=True, timeout=5)
            out["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return out
