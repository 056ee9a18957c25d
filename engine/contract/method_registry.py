"""Every built-in method's `[method]` parameters by name (a test keeps it in step with engine.methods.METHODS)."""

from __future__ import annotations

from engine.contract.method_params import (CFAParams, DAFAParams, FAALParams, FATParams, FRLParams, ImportedParams,
                                           MethodParams, NaturalParams, PGDATParams, TRADESParams, WATParams)
from engine.contract.method_params_recent import ABSLDParams, BATParams, CSRParams, TRIXParams

METHOD_PARAMS: dict[str, type[MethodParams]] = {
    cls.name: cls for cls in (NaturalParams, PGDATParams, FATParams, TRADESParams, FRLParams, CFAParams,
                              WATParams, DAFAParams, FAALParams, BATParams, CSRParams, TRIXParams, ABSLDParams,
                              ImportedParams)
}
