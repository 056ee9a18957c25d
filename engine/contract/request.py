"""An evaluation request: which attacks, on which checkpoint and split, on how many images per class,
at which eps and batch size. One frozen value, checked when it is made, whoever makes it (`fairtui
eval`, the app's evaluate dialog, `python -m engine eval`): each rule below is written once."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.contract import attacks as _attacks

# the attack grammar and its help text, derived from the attack table (engine.contract.attacks)
ATTACK_NAME = _attacks.grammar()
KNOWN_ATTACKS = _attacks.known()
CHECKPOINTS = ("last", "best", "ema", "fawa")
SPLITS = ("test", "val")


class RequestError(ValueError):
    """A bad request, in one line; ``field`` names what is wrong (attacks, eps, split, ...)."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


def check_attack(name: str) -> str:
    if _attacks.find(name) is None:  # the table as it is now (a test may add a row)
        raise RequestError("attacks", f"unknown attack {name!r}; known: {_attacks.known()}")
    return name


def parse_attack(name: str) -> tuple[str, int]:
    """'pgd20' -> ('pgd', 20); 'cw' -> ('cw', 20); 'aa' -> ('aa', 0)."""
    check_attack(name)
    attack, steps = _attacks.find(name)
    return attack.name, steps


def check_eps(eps: float, norm: str | None) -> float:
    """An L-inf eps is in (0, 1] (inputs are in [0, 1]); any eps (``norm`` None: not known yet) is positive
    and finite."""
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not math.isfinite(eps) or eps <= 0:
        raise RequestError("eps", f"must be a positive number, got {eps}")
    if norm == "linf" and eps > 1:
        raise RequestError("eps", f"must be in (0, 1] (inputs are in [0, 1]), got {eps}")
    return float(eps)


def scaled_step(own_step: float, own_eps: float, eps: float) -> float:
    """The attack step at another eps: the profile's step scaled with the eps (the ratio kept)."""
    return own_step * eps / own_eps if own_eps else own_step


@dataclass(frozen=True)
class EvalRequest:
    """``None`` / 0 mean the profile's own (its attacks, eps, eval batch size and seed; the whole split).
    ``seed`` seeds the attacks' random draws, batch by batch (engine.evaluation.evaluate.seeded_draws), and is part
    of the result's identity: the same checkpoint, settings and seed give the same numbers."""

    attacks: tuple[str, ...] = field(default_factory=tuple)
    checkpoint: str = "best"
    split: str = "test"
    n_per_class: int = 0
    batch_size: int = 0
    eps: float | None = None
    seed: int | None = None
    force: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "attacks", tuple(self.attacks))
        for name in self.attacks:
            check_attack(name)
        if self.checkpoint not in CHECKPOINTS:
            raise RequestError("checkpoint", f"unknown checkpoint {self.checkpoint!r}; choose from "
                               f"{', '.join(CHECKPOINTS)}")
        if self.split not in SPLITS:
            raise RequestError("split", f"must be test or val, got {self.split!r}")
        for name in ("n_per_class", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise RequestError(name, f"a whole number of at least 0, got {value!r}")
        if self.eps is not None:
            check_eps(self.eps, None)  # the run's norm bounds it further (engine.entry.eval_run)
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)
                                      or not 0 <= self.seed < 2**63):
            raise RequestError("seed", f"a whole number from 0 to 2^63 - 1, got {self.seed!r}")

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "EvalRequest":
        """The request as `python -m engine eval --request` receives it (unknown keys are refused)."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise RequestError(unknown[0], f"unknown request key {unknown[0]!r}; known: {', '.join(sorted(known))}")
        values = dict(doc)
        values["attacks"] = tuple(values.get("attacks") or ())
        values["n_per_class"] = int(values.get("n_per_class") or 0)
        values["batch_size"] = int(values.get("batch_size") or 0)
        values["eps"] = values.get("eps") or None
        values["seed"] = values.get("seed")
        values["force"] = bool(values.get("force"))
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["attacks"] = list(self.attacks)
        return out
