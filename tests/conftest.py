"""Shared fixtures: tiny profiles on digits that train in seconds on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# One intra-op thread for torch, here and in every engine a test starts (they inherit the environment).
# On a loaded machine two OpenMP threads spin-wait for each other: at a load of 7 on 2 cores the
# AutoAttack parity test took 203 s with two threads and 33 s with one (9 s idle either way); idle,
# the suite's heaviest tests are about 10% slower with one. Set OMP_NUM_THREADS to override.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

ROOT = Path(__file__).resolve().parents[1]
# A limit that only a hang reaches. Tests wait for subprocesses and screens this long at most: on a
# 2-core machine under a load of 20 a step is ten times slower than idle, and no test may fail for that.
HANG_S = 600.0

TINY = """
name = "tiny"
seed = 3

[data]
dataset = "digits"
val_per_class = 5
train_per_class = 30
test_per_class = 10
batch_size = 50

[model]
arch = "small_cnn"

[train]
epochs = 2
lr = 0.05
device = "cpu"
threads = 1

[attack]
eps = 0.2
step = 0.07
steps = 3

[method]
name = "pgd_at"

[eval]
attacks = ["pgd5"]
val_attack = "pgd3"
"""


@pytest.fixture
def tiny_profile(tmp_path: Path):
    """Write the tiny profile (with extra TOML appended or `[section] key=value` lines) and return its path."""

    def make(extra: str = "", name: str = "tiny.toml", base: str = TINY) -> Path:
        path = tmp_path / name
        path.write_text(base + "\n" + extra)
        return path

    return make


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it): tests that start rendezvous of their own use it,
    so that two xdist workers (or two checkouts' suites) never meet on one port."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def make_run_dir(tmp_path: Path, profile_path: Path, name: str = "run", overrides: tuple[str, ...] = ()) -> Path:
    from engine.contract.profile_io import dumps_profile, load_profile

    run_dir = tmp_path / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "profile.toml").write_text(dumps_profile(load_profile(profile_path, list(overrides))))
    return run_dir


def set_epochs(run_dir: Path, epochs: int) -> None:
    """Rewrite the run folder's `train.epochs` (a stopped run resumes to the new end): tests start long runs so
    that a signal lands mid-run on any machine, then resume only a short remainder."""
    import re

    profile = run_dir / "profile.toml"
    text, n = re.subn(r"^epochs = \d+$", f"epochs = {epochs}", profile.read_text(), flags=re.MULTILINE)
    assert n == 1, profile
    profile.write_text(text)


def run_engine(run_dir: Path, timeout: float = HANG_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "train", str(run_dir)], env=engine_env(),
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def train_tiny(folder: Path, overrides: tuple[str, ...] = ()) -> Path:
    """Train the tiny profile once in ``folder`` (``folder/runs/run``) and return the run folder."""
    profile = folder / "tiny.toml"
    profile.write_text(TINY)
    run_dir = make_run_dir(folder, profile, overrides=overrides)
    proc = run_engine(run_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run_dir


def trained_whole_and_resumed(tmp_path: Path, profile_path: Path, overrides: tuple[str, ...],
                              stop_after: int) -> tuple[Path, Path]:
    """The profile with ``overrides`` (their last one ``train.epochs=N``) trained uninterrupted, and again stopped
    after ``stop_after`` epochs and resumed to the end: the two run folders, for a method's exact-resume test."""
    whole = make_run_dir(tmp_path, profile_path, "whole", overrides)
    proc = run_engine(whole)
    assert proc.returncode == 0, proc.stderr[-2000:]
    part = make_run_dir(tmp_path, profile_path, "part", overrides)
    first = make_run_dir(tmp_path, profile_path, "first", overrides[:-1] + (f"train.epochs={stop_after}",))
    (part / "profile.toml").write_text((first / "profile.toml").read_text())
    assert run_engine(part).returncode == 0
    (part / "profile.toml").write_text((whole / "profile.toml").read_text())
    assert run_engine(part).returncode == 0
    return whole, part


def events_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def sigint_as_a_terminal_gives_it() -> None:
    """A Popen ``preexec_fn``: SIGINT back to its default in the child, so that Python turns it into
    KeyboardInterrupt. A suite started in the background by a shell without job control (`.ci/run &`) inherits
    SIGINT ignored, and a child that inherits it ignored keeps it so: a test's Ctrl-C would not reach it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def send_signal(pid: int, sig: int) -> bool:
    """Signal a process; False when it has gone (a test that holds engines with SIGSTOP and releases them)."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def fairtui_cmd(*args: str, home: Path, timeout: float = HANG_S, env_extra: dict | None = None):
    env = engine_env()
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", "from fairtui.cli import main; main()", *args, "--home", str(home)],
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
