"""The code's version as a run or a bug report records it: the engine's version and the git commit of the checkout,
with whether it had uncommitted changes anywhere and a hash of them. No torch: the app's `fairtui --version` asks
it too."""

from __future__ import annotations

import subprocess
from pathlib import Path


def code_version() -> dict[str, str | bool]:
    from engine import __version__

    out: dict[str, str | bool] = {"engine": __version__}
    here = Path(__file__).resolve().parents[2]  # the checkout: engine/, fairtui/, profiles/ and the rest
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5)
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
            diff = uncommitted_sha256(here)
            out["git_dirty"] = diff is not None
            if diff is not None:
                out["git_diff_sha256"] = diff
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def uncommitted_sha256(root: Path) -> str | None:
    """A hash of what the checkout holds beyond its commit, anywhere in it: the diff of the tracked files against
    HEAD and the untracked files that git does not ignore, by name and content. None when there is nothing (the
    commit alone says what ran). Two runs of one commit with other local edits get other hashes."""
    import hashlib

    git = ["git", "-C", str(root)]
    diff = subprocess.run([*git, "diff", "HEAD", "--binary"], capture_output=True, timeout=20)
    others = subprocess.run([*git, "ls-files", "--others", "--exclude-standard", "-z"], capture_output=True, timeout=20)
    if diff.returncode or others.returncode:
        return None
    names = sorted(n for n in others.stdout.decode(errors="replace").split("\0") if n)
    if not diff.stdout and not names:
        return None
    h = hashlib.sha256(diff.stdout)
    for name in names:
        h.update(b"\0" + name.encode())
        try:
            h.update(hashlib.sha256((root / name).read_bytes()).digest())
        except OSError:
            h.update(b"unreadable")
    return h.hexdigest()
