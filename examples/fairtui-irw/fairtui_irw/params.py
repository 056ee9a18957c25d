"""The `[method]` keys of `irw_at`: torch-free, so that fairtui checks a profile without importing the method
(the `fairtui.method_params` entry point names this class)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from engine.contract.method_params import MethodParams
from engine.contract.profile_schema import field


@dataclass(frozen=True)
class IRWParams(MethodParams):
    """The `[method]` keys of `irw_at`, checked like fairtui's own (types, bounds, unknown keys)."""

    name: ClassVar[str] = "irw_at"
    momentum: float = field(0.5, min=0.0, max=1.0)
    floor: float = field(0.05, gt=0.0, max=1.0)
