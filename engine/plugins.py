"""Methods from outside the repository, through Python's entry points (group ``fairtui.methods``).

A package declares, in its pyproject.toml::

    [project.entry-points."fairtui.methods"]
    irw_at = "fairtui_irw:InverseRobustnessReweighting"

The object is a :class:`engine.methods.base.Method` subclass whose ``name`` is the entry point's
name and whose ``params`` is its :class:`engine.method_params.MethodParams` dataclass (with the same
``name``). Once the package is installed, ``method.name = "irw_at"`` works in profiles like a built-in
name: its keys are checked by the same schema, and run, resume, sweeps, DDP, the app, compare and
export see its ``method_state``. docs/adding-a-method.md walks through one.

Plugins are loaded only when a profile names a method that is not built in (or to list the names):
the built-in methods never import a plugin. A plugin that fails to load, or that is not a valid
method, or whose name is taken, is reported once on stderr in one line naming its package, and
ignored; the built-in methods keep working.
"""

from __future__ import annotations

import sys
from typing import Any

GROUP = "fairtui.methods"
_loaded: dict[str, Any] | None = None
_problems: list[str] = []


def _package(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else ep.value.split(":")[0]


def _check(ep: Any, obj: Any, taken: set[str]) -> str | None:
    """Why ``obj`` (loaded from ``ep``) is not a usable method, or None."""
    from engine.method_params import MethodParams

    if ep.name in taken:
        return f"names the method {ep.name!r}, which is already taken"
    # engine.methods.base.Method, recognised without importing engine.methods (which imports this module)
    if not (isinstance(obj, type) and any(c.__module__ == "engine.methods.base" and c.__name__ == "Method"
                                          for c in obj.__mro__)):
        return f"{ep.value} is not a subclass of engine.methods.base.Method"
    if obj.name != ep.name:
        return f"its Method's name is {obj.name!r}, not the entry point's {ep.name!r}"
    params = getattr(obj, "params", None)
    if not (isinstance(params, type) and issubclass(params, MethodParams)) or params.name != ep.name:
        return (f"{ep.value} needs `params`: a MethodParams dataclass whose name is {ep.name!r} "
                "(engine.method_params)")
    return None


def methods() -> dict[str, Any]:
    """The plugin methods by name: {name: Method subclass}. Loaded once per process."""
    global _loaded
    if _loaded is not None:
        return _loaded
    from importlib.metadata import entry_points

    from engine.method_params import METHOD_PARAMS

    _loaded = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
        except Exception as err:  # any error of a third-party import: reported, never fatal
            _report(f"method plugin {ep.name!r} ({_package(ep)}) failed to load: {type(err).__name__}: "
                    f"{str(err).strip().splitlines()[0][:160] if str(err).strip() else ''}")
            continue
        why = _check(ep, obj, set(METHOD_PARAMS) | set(_loaded))
        if why:
            _report(f"method plugin {ep.name!r} ({_package(ep)}) ignored: {why}")
            continue
        _loaded[ep.name] = obj
    return _loaded


def params_class(name: str) -> Any:
    """The MethodParams class of plugin method ``name``, or None."""
    method = methods().get(name)
    return None if method is None else method.params


def _report(line: str) -> None:
    if line not in _problems:
        _problems.append(line)
        print(f"fairtui: {line}", file=sys.stderr)


def problems() -> list[str]:
    """What was reported about plugins in this process."""
    return list(_problems)
