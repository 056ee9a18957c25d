"""Method registry: a profile's `method.name` -> the class that trains with it."""

from __future__ import annotations

from engine.methods.bat import BAT
from engine.methods.base import Imported, Method, MethodContext, StepOutput, ValResult
from engine.methods.cfa import CFA
from engine.methods.csr import CSR
from engine.methods.dafa import DAFA
from engine.methods.faal import FAAL
from engine.methods.frl import FRL
from engine.methods.standard import FAT, PGDAT, TRADES, Natural
from engine.methods.trix import TRIX
from engine.methods.wat import WAT
from engine.methods.absld import ABSLD

METHODS: dict[str, type[Method]] = {cls.name: cls for cls in (Natural, PGDAT, FAT, TRADES, FRL, CFA, WAT, DAFA,
                                                               FAAL, BAT, CSR, TRIX, ABSLD, Imported)}


def build_method(ctx: MethodContext) -> Method:
    """The method a profile names: built in, or from an installed package (engine.contract.plugins)."""
    params = ctx.profile.method
    cls = METHODS.get(params.name)
    if cls is None:
        from engine.contract import plugins

        cls = plugins.load(params.name)
    return cls(params, ctx)


__all__ = ["METHODS", "Method", "MethodContext", "StepOutput", "ValResult", "build_method"]
