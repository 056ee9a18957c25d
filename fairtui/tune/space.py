"""`fairtui tune`'s search space (``--space KEY=LOW:HIGH[:log]`` or ``KEY=A,B,...``, checked against the
profile's schema before anything exists) and its objectives (``--objective``), computed from each epoch's
validation numbers. Optuna-free: fairtui.tune.study runs the study."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

# keys a study may not search: what the run is (its data, its name, its seed) and how it is measured
FIXED = ("name", "seed", "description", "data.", "eval.", "source.", "train.device", "train.threads",
         "train.deterministic", "train.log_to", "train.wandb_")


class TuneError(ValueError):
    """A bad study request, in one line naming the option (exit 2)."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option


# -- the search space ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Dimension:
    key: str
    kind: str  # "float", "int" or "choice"
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    choices: tuple = ()

    def suggest(self, trial) -> Any:
        if self.kind == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log)
        if self.kind == "int":
            return trial.suggest_int(self.key, self.low, self.high, log=self.log)
        return trial.suggest_categorical(self.key, list(self.choices))

    def distribution(self, opt):
        """Optuna's distribution of this dimension (the one :meth:`suggest` draws from); ``opt``: the optuna
        module (fairtui.tune.study.optuna, the one place that imports it)."""
        if self.kind == "float":
            return opt.distributions.FloatDistribution(self.low, self.high, log=self.log)
        if self.kind == "int":
            return opt.distributions.IntDistribution(self.low, self.high, log=self.log)
        return opt.distributions.CategoricalDistribution(list(self.choices))

    def spec(self) -> str:
        if self.kind == "choice":
            return ",".join(map(str, self.choices))
        return f"{self.low}:{self.high}" + (":log" if self.log else "")


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text) from None
        return value


def parse_dimension(item: str) -> Dimension:
    """``KEY=LOW:HIGH[:log]`` (floats, or ints when both ends are), or ``KEY=A,B,C`` (choices)."""
    if "=" not in item:
        raise TuneError("--space", f"expected KEY=SPEC (LOW:HIGH[:log] or A,B,...), got {item!r}")
    key, spec = (part.strip() for part in item.split("=", 1))
    if not key or not spec:
        raise TuneError("--space", f"expected KEY=SPEC, got {item!r}")
    if any(key == f or (f.endswith((".", "_")) and key.startswith(f)) for f in FIXED):
        raise TuneError("--space", f"{key} is not tunable: a study compares configurations of one run setting (its "
                        "data, seed and evaluation stay fixed)")
    if ":" in spec:
        parts = spec.split(":")
        log = len(parts) == 3 and parts[2] == "log"
        if len(parts) not in (2, 3) or (len(parts) == 3 and not log):
            raise TuneError("--space", f"{key}: expected LOW:HIGH or LOW:HIGH:log, got {spec!r}")
        try:
            low, high = _number(parts[0]), _number(parts[1])
        except ValueError:
            raise TuneError("--space", f"{key}: {spec!r} is not a range of numbers") from None
        if not low < high:
            raise TuneError("--space", f"{key}: an empty or inverted range {spec!r} (LOW must be below HIGH)")
        if log and low <= 0:
            raise TuneError("--space", f"{key}: a log range needs LOW > 0, got {spec!r}")
        kind = "int" if isinstance(low, int) and isinstance(high, int) else "float"
        return Dimension(key, kind, low, high, log)
    choices = tuple(c.strip() for c in spec.split(","))
    if len(choices) < 2 or any(not c for c in choices):
        raise TuneError("--space", f"{key}: a choice needs at least two values, got {spec!r}")
    if any(ch in c for c in choices for ch in "\"\n\r\t\x00") or any(ord(ch) < 32 or ord(ch) == 127 for c in choices
                                                                        for ch in c):
        raise TuneError("--space", f"{key}: a choice is a plain value (a number, true/false or a word), without "
                        f"quotes or control characters: {spec!r}")
    return Dimension(key, "choice", choices=tuple(_choice(c) for c in choices))


def _choice(text: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def override(key: str, value: Any) -> str:
    """A trial's value as a `--set` item (TOML): a string as a TOML basic string, every quote, backslash and
    control character escaped, so that a choice cannot close its string and write another key."""
    if isinstance(value, str):
        import json

        return f"{key}={json.dumps(value)}"
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    return f"{key}={value!r}"


def check_space(profile_path: str, base: list[str], space: list[Dimension]) -> None:
    """Every dimension's ends (or choices) checked against the profile schema, as `--set` is, before anything
    exists: a key the profile does not have, or a value it refuses, is one line naming the option."""
    from engine.contract.profile_io import load_profile
    from engine.contract.profile_schema import ProfileError

    for dim in space:
        for value in ((dim.low, dim.high) if dim.kind != "choice" else dim.choices):
            try:
                load_profile(profile_path, [*base, override(dim.key, value)])
            except ProfileError as err:
                raise TuneError("--space", f"{dim.key}={dim.spec()}: {err}") from None


# -- objectives -----------------------------------------------------------------------------------------------

OBJECTIVES = ("worst", "avg_worst", "worst_at_avg")


@dataclasses.dataclass(frozen=True)
class Objective:
    """What a trial maximises, from an epoch's validation numbers (never the test split):

    - ``worst``: the worst class's robust accuracy;
    - ``avg_worst``: average + worst-class robust accuracy (the methods' common selection score);
    - ``worst_at_avg``: the worst class's robust accuracy among configurations whose average robust accuracy
      reaches ``floor``; below it the value is the (negative) shortfall, so that every configuration that
      reaches the floor ranks above every one that does not."""

    name: str
    floor: float | None = None

    def value(self, epoch_event: dict) -> float | None:
        val = epoch_event.get("val") or {}
        avg, worst = val.get("avg_robust"), val.get("worst_robust")
        if avg is None or worst is None:
            return None
        if self.name == "worst":
            return float(worst)
        if self.name == "avg_worst":
            return float(avg) + float(worst)
        return float(worst) if avg >= self.floor else float(avg) - self.floor

    def label(self) -> str:
        return f"worst_at_avg (avg >= {self.floor:.4f})" if self.name == "worst_at_avg" else self.name


def parse_objective(text: str, home: Path) -> Objective:
    """``worst``, ``avg_worst``, ``worst_at_avg:X`` (X a fraction, 0.35) or ``worst_at_avg:RUN-D`` (RUN's best
    validation average robust accuracy minus D points: ``worst_at_avg:my-pgd-at-2``)."""
    name, _, arg = text.partition(":")
    if name not in OBJECTIVES:
        raise TuneError("--objective", f"unknown objective {text!r}; choose from worst, avg_worst, "
                        "worst_at_avg:FLOOR (a fraction, or RUN-POINTS: a baseline run's average minus points)")
    if name != "worst_at_avg":
        if arg:
            raise TuneError("--objective", f"{name} takes no argument, got {text!r}")
        return Objective(name)
    if not arg:
        raise TuneError("--objective", "worst_at_avg needs its floor: worst_at_avg:0.35, or worst_at_avg:RUN-2 "
                        "(RUN's validation average minus 2 points)")
    try:
        floor = float(arg)
    except ValueError:
        floor = None
    if floor is not None:
        if not 0 <= floor <= 1:
            raise TuneError("--objective", f"a floor is a fraction in [0, 1], got {arg}")
        return Objective(name, floor)
    ref, _, points = arg.rpartition("-")
    try:
        drop = float(points)
    except ValueError:
        raise TuneError("--objective", f"expected worst_at_avg:FRACTION or worst_at_avg:RUN-POINTS, got {text!r}") \
            from None
    if not (math.isfinite(drop) and 0 <= drop <= 100):
        raise TuneError("--objective", f"{text!r}: the points below the baseline are a number from 0 to 100, "
                        f"got {points}")
    from fairtui.runs.home import RunNotFound, find_run
    from fairtui.runs.runfolder import RunView

    try:
        view = RunView.load(find_run(home, ref, unique_name=True))
    except RunNotFound as err:
        raise TuneError("--objective", f"no baseline run {ref!r}: {err}") from None
    averages = [e["val"]["avg_robust"] for e in view.epochs if (e.get("val") or {}).get("avg_robust") is not None]
    if not averages:
        raise TuneError("--objective", f"baseline run {ref!r} has no validation epoch yet")
    best = view.epochs[-1].get("best_epoch")
    base = next((e["val"]["avg_robust"] for e in view.epochs if e.get("epoch") == best), max(averages))
    return Objective(name, base - drop / 100)


# -- the study ----------------------------------------------------------------------------------------------
