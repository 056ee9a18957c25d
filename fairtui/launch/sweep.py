"""Sweeps: the cross product of grids over profile keys and seeds, each child a normal run.

A sweep is described on the command line (`--grid KEY=V1,V2 --seeds N`) or in the
profile's own ``[sweep]`` table::

    [sweep]
    seeds = [0, 1, 2]
    launcher = "local"        # or "slurm"
    [sweep.grid]
    "method.eta" = [0.01, 0.05, 0.1, 0.5]

Its record is ``<home>/sweeps/<sweep_id>.json``; every child's ``meta.json``
names the sweep and its grid values, and carries the tags ``sweep:<id>`` and
``KEY=VALUE``.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.contract.config import profile_from_table
from engine.contract.profile_io import apply_overrides, check_data_root, parse_override, read_toml
from engine.contract.profile_schema import ProfileError

SWEEP_KEYS = ("grid", "seeds", "launcher", "per_gpu", "slurm")


@dataclass
class SweepSpec:
    grid: dict[str, list[Any]] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    launcher: str = "local"
    per_gpu: int = 1
    slurm: dict[str, Any] = field(default_factory=dict)


def split_profile(path: str | Path) -> tuple[dict, dict]:
    """The profile table without its ``[sweep]`` table, and that table."""
    raw = read_toml(path)
    sweep = raw.pop("sweep", {})
    if not isinstance(sweep, dict):
        raise ProfileError(str(path), "sweep", "expected a table")
    return raw, sweep


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """``KEY=V1,V2`` -> {KEY: [V1, V2]}, each value read as a TOML value."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        if "=" not in item:
            raise ProfileError("--grid", item, "expected KEY=V1,V2,...")
        key, values = item.split("=", 1)
        parts = [v for v in values.split(",") if v.strip()]
        if not parts:
            raise ProfileError("--grid", key, "the value list is empty")
        grid[key.strip()] = [parse_override(f"{key}={v.strip()}")[1] for v in parts]
    return grid


def build_spec(path: str | Path, sweep_table: dict, grid_args: list[str], seeds: int | None,
               seed_list: list[int] | None, launcher: str | None) -> SweepSpec:
    file = str(path)
    for key in sweep_table:
        if key not in SWEEP_KEYS:
            raise ProfileError(file, f"sweep.{key}", f"unknown key (known: {', '.join(SWEEP_KEYS)})")
    grid = {k: list(v) if isinstance(v, list) else [v] for k, v in sweep_table.get("grid", {}).items()}
    for key, values in grid.items():
        if not values:
            raise ProfileError(file, f"sweep.grid.{key}", "the value list is empty")
    grid.update(parse_grid(grid_args))
    grid_seeds = grid.pop("seed", None)  # a grid over seeds is the seeds: one child per seed, like --seeds
    if grid_seeds is not None:
        if seed_list or seeds or sweep_table.get("seeds"):
            raise ProfileError("--grid", "seed", "give the seeds once: --grid seed=..., --seeds N, --seed-list "
                               "or the profile's sweep.seeds")
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in grid_seeds):
            raise ProfileError("--grid", "seed", f"seeds are whole numbers >= 0, got {grid_seeds}")
        seed_list = list(grid_seeds)
    if seed_list:
        chosen = list(seed_list)
    elif seeds:
        chosen = list(range(seeds))
    else:
        chosen = list(sweep_table.get("seeds", []))
    spec = SweepSpec(grid=grid, seeds=chosen, launcher=launcher or sweep_table.get("launcher", "local"),
                     per_gpu=int(sweep_table.get("per_gpu", 1)), slurm=dict(sweep_table.get("slurm", {})))
    if spec.launcher not in ("local", "slurm"):
        raise ProfileError(file if not launcher else "--launcher", "launcher",
                           f"unknown launcher {spec.launcher!r}; choose local or slurm")
    if not spec.grid and not spec.seeds:
        raise ProfileError(file, "sweep", "nothing to sweep: give --grid KEY=V1,V2 and/or --seeds N")
    return spec


@dataclass
class Child:
    overrides: list[str]
    values: dict[str, Any]  # grid values (and the seed) of this child

    def tags(self, sweep_id: str) -> list[str]:
        return [f"sweep:{sweep_id}"] + [f"{k}={v}" for k, v in self.values.items()]


def expand(path: str | Path, raw: dict, spec: SweepSpec) -> list[tuple[Child, Any]]:
    """Every child with its resolved profile; any bad grid key or value is a ProfileError naming it."""
    keys = list(spec.grid)
    combos = list(itertools.product(*[spec.grid[k] for k in keys])) or [()]
    seeds = spec.seeds or [raw.get("seed", 0)]
    out = []
    for combo in combos:
        for seed in seeds:
            values = dict(zip(keys, combo))
            overrides = [f"{k}={_toml(v)}" for k, v in values.items()] + [f"seed={seed}"]
            table = apply_overrides(raw, overrides)  # a key the schema does not know fails below
            try:
                profile = profile_from_table(table, str(path))
            except ProfileError as err:
                if err.key in values or err.key == "seed":  # a grid's value is at fault: say --grid
                    raise ProfileError("--grid", err.key, err.problem) from None
                raise  # the profile (with --set) is: its own message names the file
            check_data_root(profile, str(path))  # before any child's folder exists
            out.append((Child(overrides, {**values, "seed": seed}), profile))
    return out


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, list) else str(value)


def new_sweep_id() -> str:
    return "sweep-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def sweep_path(home: Path, sweep_id: str) -> Path:
    return home / "sweeps" / f"{sweep_id}.json"


def save_record(home: Path, record: dict) -> None:
    path = sweep_path(home, record["sweep_id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


def resolve_sweep_id(home: Path, ref: str) -> str:
    """A sweep's full id from its id, a unique prefix of it, or its short form (the random last part,
    as the runs table shows it); ProfileError naming the known sweeps otherwise."""
    if sweep_path(home, ref).exists():
        return ref
    known = sorted(p.stem for p in (home / "sweeps").glob("*.json")) if (home / "sweeps").is_dir() else []
    matches = [k for k in known if k.startswith(ref) or k.rsplit("-", 1)[-1] == ref]
    if len(matches) == 1:
        return matches[0]
    why = f"{len(matches)} sweeps match: {', '.join(matches)}" if matches else "no such sweep"
    raise ProfileError("--sweep", ref, f"{why}; known: {', '.join(known) or 'none'}")


def load_record(home: Path, sweep_id: str) -> dict:
    return json.loads(sweep_path(home, resolve_sweep_id(home, sweep_id)).read_text())
