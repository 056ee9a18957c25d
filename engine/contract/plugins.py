"""Methods from outside the repository, through Python's entry points (groups ``fairtui.methods`` and
``fairtui.method_params``).

A package declares, in its pyproject.toml::

    [project.entry-points."fairtui.methods"]
    irw_at = "fairtui_irw.method:InverseRobustnessReweighting"

    [project.entry-points."fairtui.method_params"]
    irw_at = "fairtui_irw.params:IRWParams"

The first is a :class:`engine.methods.base.Method` subclass whose ``name`` is the entry point's
name and whose ``params`` is its :class:`engine.contract.method_params.MethodParams` dataclass (with the same
``name``). The second names that dataclass in a module that imports no torch (and whose package's
``__init__`` imports none either): a profile is checked with it alone, so `fairtui run`, `sweep` and the
app's launch dialog never import the method, nor torch. A plugin that declares no params entry point
still works: its Method is imported to read its params, with a one-line note saying so. Once the package is installed, ``method.name = "irw_at"`` works in profiles like a built-in
name: its keys are checked by the same schema, and run, resume, sweeps, DDP, the app, compare and
export see its ``method_state``. docs/adding-a-method.md walks through one.

Plugins are loaded only when a profile names a method that is not built in, and then only that one:
the built-in methods never import a plugin, and a name that no method has is answered with the
names from the packages' metadata, importing nothing. A plugin that fails to load (an exception, even
``sys.exit``), takes longer than ``LOAD_TIMEOUT_S`` to import, is not a valid method, or whose name is
taken, is reported once on stderr in one line naming its package, and ignored; the process goes on.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

GROUP = "fairtui.methods"
PARAMS_GROUP = "fairtui.method_params"
LOAD_TIMEOUT_S = 20.0
_loaded: dict[Any, Any] | None = None  # name -> Method; ("params", name) -> MethodParams
_problems: list[str] = []


def _package(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else ep.value.split(":")[0]


def _check(ep: Any, obj: Any, taken: set[str]) -> str | None:
    """Why ``obj`` (loaded from ``ep``) is not a usable method, or None."""
    from engine.contract.method_params import MethodParams

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
                "(engine.contract.method_params)")
    return None


def _entry_points(group: str = GROUP) -> dict[str, Any]:
    """The installed plugins' entry points of ``group`` by name, from their packages' metadata (nothing
    imported); of two with one name, the first (sorted by package) is kept and the other reported."""
    from importlib.metadata import entry_points

    from engine.contract.method_registry import METHOD_PARAMS

    out: dict[str, Any] = {}
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, _package(e))):
        if ep.name in METHOD_PARAMS:
            _report(f"method plugin {ep.name!r} ({_package(ep)}) ignored: names the method {ep.name!r}, which is "
                    "already taken")
            continue
        if ep.name in out:
            _report(f"method plugin {ep.name!r} ({_package(ep)}) ignored: names the method {ep.name!r}, which is "
                    f"already taken by {_package(out[ep.name])}")
            continue
        out[ep.name] = ep
    return out


def names() -> list[str]:
    """The plugin methods' names, read from metadata: listing them imports no plugin."""
    return sorted(_entry_points())


def _import(ep: Any) -> Any:
    """``ep.load()`` on a daemon thread, waited for LOAD_TIMEOUT_S at most; whatever it raises (SystemExit
    too) is raised here as an exception of its own, never as the end of this process."""
    outcome: list[Any] = []

    def load() -> None:
        try:
            outcome.append(("ok", ep.load()))
        except BaseException as err:  # noqa: BLE001: a plugin's sys.exit or KeyboardInterrupt is its failure
            outcome.append(("error", err))

    worker = threading.Thread(target=load, name=f"plugin-{ep.name}", daemon=True)
    worker.start()
    worker.join(LOAD_TIMEOUT_S)
    if worker.is_alive():
        raise TimeoutError(f"its import did not finish within {LOAD_TIMEOUT_S:g} s")
    kind, value = outcome[0]
    if kind == "error":
        if isinstance(value, SystemExit):
            raise RuntimeError(f"it called sys.exit({value.code!r}) while importing")
        raise value if isinstance(value, Exception) else RuntimeError(type(value).__name__)
    return value


def load(name: str) -> Any:
    """Plugin method ``name`` (its Method subclass), loaded alone and checked; None if no usable one."""
    global _loaded
    from engine.contract.method_registry import METHOD_PARAMS

    _loaded = {} if _loaded is None else _loaded
    if name in _loaded:
        return _loaded[name]
    ep = _entry_points().get(name)
    obj = None
    if ep is not None:
        try:
            obj = _import(ep)
        except Exception as err:  # any error of a third-party import: reported, never fatal
            _report(f"method plugin {ep.name!r} ({_package(ep)}) failed to load: {type(err).__name__}: "
                    f"{str(err).strip().splitlines()[0][:160] if str(err).strip() else ''}")
        else:
            why = _check(ep, obj, set(METHOD_PARAMS))
            if why:
                _report(f"method plugin {ep.name!r} ({_package(ep)}) ignored: {why}")
                obj = None
    _loaded[name] = obj
    return obj


def methods() -> dict[str, Any]:
    """Every usable plugin method by name: {name: Method subclass} (loads each; for listings only)."""
    return {name: method for name in names() if (method := load(name)) is not None}


def params_class(name: str) -> Any:
    """The MethodParams class of plugin method ``name``, or None: from its ``fairtui.method_params`` entry
    point, loaded alone (no Method, no torch); for a plugin that declares none, from its Method."""
    from engine.contract.method_params import MethodParams

    global _loaded
    _loaded = {} if _loaded is None else _loaded
    if ("params", name) in _loaded:  # cached beside the methods (tests reset both with _loaded = None)
        return _loaded[("params", name)]
    ep = _entry_points(PARAMS_GROUP).get(name)
    cls = None
    if ep is not None and name in _entry_points():
        try:
            cls = _import(ep)
        except Exception as err:  # any error of a third-party import: reported, never fatal
            _report(f"method plugin {name!r} ({_package(ep)}): its params failed to load: {type(err).__name__}: "
                    f"{str(err).strip().splitlines()[0][:160] if str(err).strip() else ''}")
        else:
            if not (isinstance(cls, type) and issubclass(cls, MethodParams)) or cls.name != name:
                _report(f"method plugin {name!r} ({_package(ep)}) ignored: its {PARAMS_GROUP} entry point "
                        f"{ep.value} is not a MethodParams dataclass named {name!r}")
                cls = None
    elif ep is None and name in _entry_points():
        method = load(name)
        cls = None if method is None else method.params
        if cls is not None:
            _report(f"method plugin {name!r} ({_package(_entry_points()[name])}) declares no {PARAMS_GROUP} "
                    "entry point: its Method, and torch, were imported to read its params")
    _loaded[("params", name)] = cls
    return cls


def _report(line: str) -> None:
    if line not in _problems:
        _problems.append(line)
        print(f"fairtui: {line}", file=sys.stderr)


def problems() -> list[str]:
    """What was reported about plugins in this process."""
    return list(_problems)
