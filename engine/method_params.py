"""The `[method]` table of a profile: one frozen dataclass of parameters per method.

Torch-free (the command line checks profiles with it). The training code for
each name lives in `engine.methods`; a test keeps the two registries in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from engine.profile_schema import ProfileError, field


@dataclass(frozen=True)
class MethodParams:
    name: ClassVar[str] = ""

    def validate(self, file: str) -> None:
        """Check relations between keys; raise ProfileError."""


@dataclass(frozen=True)
class NaturalParams(MethodParams):
    name: ClassVar[str] = "natural"


@dataclass(frozen=True)
class PGDATParams(MethodParams):
    """Madry et al.: cross-entropy on PGD examples."""

    name: ClassVar[str] = "pgd_at"


@dataclass(frozen=True)
class TRADESParams(MethodParams):
    """Zhang et al.; with `beta_per_class`, Tian et al.'s class-wise beta (Eq. 5)."""

    name: ClassVar[str] = "trades"
    beta: float = field(6.0, min=0.0)
    beta_per_class: tuple[float, ...] = field((), items_min=0.0)  # empty: beta for every class
    # The CFA authors' code divides the TRADES loss by (1 + beta); the original does not.
    scale_by_one_plus_beta: bool = field(False)


METHOD_PARAMS: dict[str, type[MethodParams]] = {
    cls.name: cls for cls in (NaturalParams, PGDATParams, TRADESParams)
}


def register_params(cls: type[MethodParams]) -> type[MethodParams]:
    """Add a method's parameter class to the registry (used by method modules' params)."""
    if cls.name in METHOD_PARAMS:
        raise ValueError(f"method {cls.name!r} registered twice")
    METHOD_PARAMS[cls.name] = cls
    return cls


__all__ = ["METHOD_PARAMS", "MethodParams", "NaturalParams", "PGDATParams", "ProfileError",
           "TRADESParams", "register_params"]
