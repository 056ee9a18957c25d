"""Create run folders and start engine processes detached from the caller.

The engine runs in its own session with its output in the run folder, so a
dropped SSH connection or a closed app leaves it training.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.contract.atomic import atomic_write_text
from engine.contract.config import Profile
from engine.contract.profile_io import check_data_root, dumps_profile
from engine.contract import protocol
from engine.contract.protocol import ENGINE_LOCK, LOCK_FD_ENV  # the run's one engine lock
from engine.contract.profile_schema import ProfileError
from fairtui.runs.home import EngineRunning, new_run_id, runs_dir


@dataclass(frozen=True)
class GpuChoice:
    """``--gpus``: None (the engine decides), ``cpu``, or a list of CUDA device indices."""

    cpu: bool = False
    devices: tuple[int, ...] = field(default_factory=tuple)

    @classmethod
    def parse(cls, text: str | None) -> "GpuChoice | None":
        if text is None or text == "":
            return None
        if text.strip().lower() == "cpu":
            return cls(cpu=True)
        if not re.fullmatch(r"\d+(,\d+)*", text.strip()):
            raise ProfileError("--gpus", "", f"expected 'cpu' or device indices like 0,1; got {text!r}")
        devices = tuple(int(i) for i in text.split(","))
        twice = sorted({d for d in devices if devices.count(d) > 1})
        if twice:
            raise ProfileError("--gpus", "", f"GPU {', '.join(map(str, twice))} named more than once in {text!r}: "
                               "a run takes one process per GPU, and NCCL refuses two on one GPU ('Duplicate "
                               "GPU detected')")
        return cls(devices=devices)

    @classmethod
    def from_option(cls, text: str | None, inventory=None) -> "GpuChoice | None":
        """``--gpus`` as typed: refused when empty, or when it names a GPU this machine does not have
        (``inventory``: the visible GPUs, default fairtui.launch.gpus.inventory())."""
        if text is None:
            return None
        if not text.strip():
            raise ProfileError("--gpus", "", "empty; give cpu or device indices like 0 or 0,1")
        choice = cls.parse(text)
        if choice is None or choice.cpu:
            return choice
        if inventory is None:
            from fairtui.launch.gpus import inventory as read_inventory

            inventory = read_inventory()
        have = {g.index: g.name for g in inventory}
        missing = [d for d in choice.devices if d not in have]
        if missing:
            listing = ", ".join(f"{i} ({n})" for i, n in sorted(have.items())) or "none (no NVML, no nvidia-smi)"
            raise ProfileError("--gpus", "", f"no GPU {', '.join(map(str, missing))} on this machine; its GPUs: "
                               f"{listing}; use --gpus cpu to train on the CPU")
        return choice

    def overrides(self) -> list[str]:
        return ['train.device="cpu"'] if self.cpu else []

    def env(self) -> dict[str, str]:
        if self.cpu:
            return {"CUDA_VISIBLE_DEVICES": ""}
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.devices))}

    def label(self) -> str:
        return "cpu" if self.cpu else ",".join(map(str, self.devices))


def create_run(home: Path, profile: Profile, profile_path: str, name: str | None, tags: list[str],
               gpus: GpuChoice | None, extra_meta: dict | None = None, imported: bool = False) -> Path:
    """Make ``<home>/runs/<id>/`` with the resolved ``profile.toml`` and ``meta.json``. What can be
    checked before training is checked first (ProfileError), so a refused profile leaves nothing.
    Only `fairtui import` (``imported``) makes a run from an imported model's profile."""
    if profile.source is not None and not imported:
        from engine.contract.profile_schema import ProfileError

        raise ProfileError(profile_path or "profile", "source", "this is an imported model's profile: it does "
                           "not train (`fairtui import` makes such runs; `fairtui eval` evaluates them)")
    check_data_root(profile, profile_path or "profile")
    run_id = new_run_id()
    run_dir = runs_dir(home) / run_id
    # Whole or not at all: the profile and meta are written in a hidden staging folder, which becomes
    # the run by one rename. A full disk (or any failure) leaves no run with an empty profile behind.
    staging = runs_dir(home) / f".new-{run_id}"
    staging.mkdir(parents=True)
    remove_stale_staging(home)
    try:
        atomic_write_text(staging / "profile.toml", dumps_profile(profile))
        write_meta(staging, {"run_id": run_id, "name": name or profile.name, "tags": list(tags),
                             "profile_path": profile_path, "gpus": gpus.label() if gpus else None,
                             "created": time.time(), **(extra_meta or {})})
        os.rename(staging, run_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return run_dir


def write_meta(run_dir: Path, meta: dict) -> None:
    write_json(run_dir / "meta.json", meta)


def change_meta(run_dir: Path, change) -> dict:
    """Read, change and write ``meta.json`` under an exclusive lock on ``<run>/.meta.lock``, so that
    concurrent writers (tag, note, the queue, Slurm) never lose each other's updates."""
    import contextlib

    from engine.contract.locks import locked

    with locked(run_dir / ".meta.lock"):
        path = run_dir / "meta.json"
        meta = {"run_id": run_dir.name}
        with contextlib.suppress(FileNotFoundError, ValueError):
            meta = json.loads(path.read_text())
        change(meta)
        write_meta(run_dir, meta)
    return meta


STALE_STAGING_S = 600.0  # a staging folder lives for milliseconds; one this old was left by a killed process


def remove_stale_staging(home: Path) -> list[str]:
    """Remove the staging folders (``runs/.new-*``) that a process killed while making a run left behind; no
    reader lists them as runs, and nothing else removes them. Each new run sweeps them. Returns their names."""
    now, removed = time.time(), []
    for folder in runs_dir(home).glob(".new-*"):
        try:
            if now - folder.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(folder)
                removed.append(folder.name)
        except OSError:  # made or removed meanwhile, or not ours to remove: left
            continue
    return removed


def engine_command(run_dir: Path, nproc: int = 1) -> list[str]:
    """The engine's command line; ``nproc`` > 1: one run on that many processes (DDP, one per GPU)."""
    return protocol.engine_command("train", run_dir, *(["--nproc", str(nproc)] if nproc > 1 else []))


def hold_engine_lock(run_dir: Path):
    """``<run>/engine.lock``, locked (an open file), for a training engine about to start. The engine
    inherits the open file and so holds the lock for its whole life, whoever started it and whatever
    happens to them: the lock is held from before the engine exists until it exits, with no gap a
    liveness check could fall into (engine.json is written by the engine, once it has started)."""
    from engine.contract.locks import try_lock

    lock = try_lock(run_dir / ENGINE_LOCK, patience=0.5)  # a reader's probe holds it for an instant
    if lock is None:
        raise EngineRunning(f"run {run_dir.name}: an engine already trains it (it holds {ENGINE_LOCK}); "
                            "`fairtui stop` it first") from None
    return lock


def start_engine(run_dir: Path, gpus: GpuChoice | None = None, command: list[str] | None = None) -> subprocess.Popen:
    """Start the engine detached: its own session, stdin closed, output appended to ``engine.log``.
    A training engine inherits ``engine.lock`` (:func:`hold_engine_lock`): a second one for the same run
    is refused (EngineRunning)."""
    env = dict(os.environ)
    if gpus is not None:
        env.update(gpus.env())
    env.setdefault("PYTHONUNBUFFERED", "1")
    if command is None:  # several GPUs for one run: one process per GPU under torch.distributed
        command = engine_command(run_dir, len(gpus.devices) if gpus is not None and not gpus.cpu else 1)
    train = command[2:4] == ["engine", "train"]
    lock = hold_engine_lock(run_dir) if train else None
    try:
        if train:
            (run_dir / "stop.requested").unlink(missing_ok=True)  # a stop of an earlier engine is not this one's
        if lock is not None:
            env[LOCK_FD_ENV] = str(lock.fileno())  # the engine holds this lock: it takes no second one
        with open(run_dir / "engine.log", "ab") as log:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                    start_new_session=True, cwd=os.getcwd(),
                                    pass_fds=(lock.fileno(),) if lock else ())
    finally:
        if lock is not None:
            lock.close()  # the engine holds its own copy of the locked file
    return proc  # until the engine writes engine.json, the lock it holds says it is starting


def write_json(path: Path, obj: dict) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1))


def resolve_init_from(profile, path: str, home):
    """A fine-tune's `method.init_from` and a distillation's `method.teacher` may name an earlier run (id, prefix or
    name): record its checkpoint file, so the saved profile says exactly which weights the run starts from or
    learns from."""
    for key in ("init_from", "teacher"):
        profile = _resolve_run_ref(profile, key, path, home)
    return profile


def _resolve_run_ref(profile, key: str, path: str, home):
    import dataclasses
    from pathlib import Path

    from engine.contract.profile_schema import ProfileError
    from fairtui.runs.home import RunNotFound, find_run, resolve_home

    ref = getattr(profile.method, key, "")
    if not ref:
        return profile
    if Path(ref).expanduser().exists():
        from engine.contract.protocol import resolve_init_checkpoint, resolve_teacher_checkpoint

        resolve = resolve_init_checkpoint if key == "init_from" else resolve_teacher_checkpoint
        try:
            checkpoint = resolve(ref)
        except ProfileError as err:
            raise ProfileError(path, err.key, err.problem) from None
        check_init_checkpoint(checkpoint, path, key)
        return profile
    try:
        run_dir = find_run(resolve_home(home), ref, unique_name=True)
    except RunNotFound as err:
        raise ProfileError(path, f"method.{key}", f"no such file or single run: {err}") from None
    for name in ("best.pt", "last.pt"):
        checkpoint = run_dir / "checkpoints" / name
        if checkpoint.exists():
            check_init_checkpoint(checkpoint, path, key)
            method = dataclasses.replace(profile.method, **{key: str(checkpoint.resolve())})
            return dataclasses.replace(profile, method=method)
    raise ProfileError(path, f"method.{key}", f"run {run_dir.name} has no checkpoint yet")


def check_init_checkpoint(checkpoint, path: str, key: str = "init_from") -> None:
    """The weights a run starts from load safely (weights only, nothing run) before its folder exists: checked
    by the engine (`python -m engine check-weights`), so that this process never imports torch."""
    import subprocess

    from engine.contract.profile_schema import ProfileError
    from engine.contract.protocol import engine_command

    out = subprocess.run(engine_command("check-weights", checkpoint), capture_output=True,
                         text=True)
    if out.returncode != 0:
        reason = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        raise ProfileError(path, f"method.{key}", reason)
