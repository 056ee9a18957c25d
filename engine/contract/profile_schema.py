"""Strict loading of TOML tables into frozen dataclasses.

Torch-free on purpose: the command line validates a profile before it starts
anything, and `fairtui` must not pay for importing torch.

A field's `metadata` may carry:
- ``min`` / ``max``: inclusive bounds; ``gt``: exclusive lower bound;
- ``choices``: the allowed values of a string;
- ``fraction``: a float that may also be written as ``"8/255"``;
- ``items_min`` / ``items_max``: bounds for every item of a tuple; ``items_choices``: its allowed values;
- ``max_len``: the longest string (default MAX_STRING); ``allow_inf``: a float may be +inf;
- ``one_line``: a string that is shown as a name (a profile's ``name``): no control character (an escape
  sequence would act on the terminal that prints it), no bidirectional or zero-width control;
- ``percent``: an item of an integer tuple may also be a percentage string, ``"50%"``, or a count back from the
  end, ``"-10"`` (each kept as it is for the caller to resolve, e.g. milestones relative to the epochs).
Every float must be finite unless ``allow_inf``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from fractions import Fraction
from typing import Any


# Size limits: a profile is copied into the run folder, every event stream and every checkpoint.
MAX_STRING = 4096  # characters of any string value (a description: DESCRIPTION_MAX)
MAX_ITEMS = 1000  # items of any list (milestones, class-wise vectors up to 1,000 classes)
# bidirectional overrides and isolates, and zero-width characters: they make a name print as another
NOT_IN_A_NAME = frozenset("\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff")


class ProfileError(ValueError):
    """A bad profile: the message reads ``FILE: KEY: what is wrong``."""

    def __init__(self, file: str, key: str, problem: str):
        self.file, self.key, self.problem = file, key, problem
        super().__init__(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")


def parse_fraction(value: Any) -> float:
    """Return ``value`` as a float; accepts numbers and strings like ``"8/255"``."""
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(Fraction(value.strip()))
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"expected a number or a fraction like \"8/255\", got {value!r}") from None
    raise ValueError(f"expected a number, got {type(value).__name__}")


def parse_from_end(value: str) -> int:
    """``"-10"`` -> 10: a count back from the end (a milestone relative to the last epoch), a whole number >= 0."""
    text = value.strip()
    if not (text.startswith("-") and text[1:].strip().isdigit()):
        raise ValueError(f"expected an integer, a percentage like \"50%\" or a count from the end like \"-10\", "
                         f"got {value!r}")
    return int(text[1:])


def parse_percent(value: str) -> Fraction:
    """``"50%"`` -> Fraction(50): a percentage in (0, 100], exactly."""
    text = value.strip()
    try:
        if not text.endswith("%"):
            raise ValueError
        pct = Fraction(text[:-1].strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"expected an integer or a percentage like \"50%\", got {value!r}") from None
    if not 0 < pct <= 100:
        raise ValueError(f"a percentage must be in (0%, 100%], got {value!r}")
    return pct


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce_scalar(value: Any, tp: Any, meta: dict) -> Any:
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if meta.get("fraction"):
            number = parse_fraction(value)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {value!r}")
        else:
            number = float(value)
        if not math.isfinite(number) and not (meta.get("allow_inf") and number == math.inf):
            raise ValueError(f"must be a finite number, got {value!r}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        limit = meta.get("max_len", MAX_STRING)
        if len(value) > limit:
            raise ValueError(f"at most {limit} characters, got {len(value)}")
        if meta.get("one_line"):
            bad = next((c for c in value if c in NOT_IN_A_NAME or ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f), None)
            if bad is not None:
                raise ValueError(f"no control characters in a name: {value!r} holds U+{ord(bad):04X}")
        return value
    raise TypeError(f"unsupported field type {tp!r}")  # a bug in a schema, not in a profile


def _check_range(value: Any, meta: dict, prefix: str = "") -> None:
    lo, hi, gt = meta.get(prefix + "min"), meta.get(prefix + "max"), meta.get(prefix + "gt")
    if gt is not None and not value > gt:
        raise ValueError(f"must be greater than {gt}, got {value}")
    if lo is not None and value < lo:
        raise ValueError(f"must be at least {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"must be at most {hi}, got {value}")


def coerce(value: Any, tp: Any, meta: dict) -> Any:
    """Check and convert one TOML value to the field type ``tp``; raise ValueError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return coerce(value, args[0], meta)
    if origin is tuple:
        item_tp = typing.get_args(tp)[0]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected a list, got {value!r}")
        if len(value) > MAX_ITEMS:
            raise ValueError(f"at most {MAX_ITEMS} items, got {len(value)}")
        items = []
        for i, item in enumerate(value):
            try:
                if meta.get("percent") and isinstance(item, str):
                    items.append(f"-{parse_from_end(item)}" if item.strip().startswith("-")
                                 else f"{parse_percent(item)}%")
                    continue
                converted = coerce(item, item_tp, {"fraction": meta.get("fraction"), "choices": meta.get("items_choices")})
                _check_range(converted, meta, "items_")
            except ValueError as err:
                raise ValueError(f"item {i}: {err}") from None
            items.append(converted)
        return tuple(items)
    converted = _coerce_scalar(value, tp, meta)
    choices = meta.get("choices")
    if choices is not None and converted not in choices:
        hint = difflib.get_close_matches(str(converted), [str(c) for c in choices], n=1)
        near = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ValueError(f"unknown value {converted!r}{near}; choose from {', '.join(map(str, choices))}")
    if isinstance(converted, (int, float)) and not isinstance(converted, bool):
        _check_range(converted, meta)
    return converted


def unknown_key_message(key: str, known: list[str]) -> str:
    hint = difflib.get_close_matches(key, known, n=1)
    near = f"; did you mean {hint[0]!r}?" if hint else ""
    return f"unknown key{near} (known: {', '.join(sorted(known))})"


def build(cls: type, table: Any, file: str, where: str, skip: tuple[str, ...] = ()) -> Any:
    """Build the frozen dataclass ``cls`` from a TOML table, strictly."""
    if not isinstance(table, dict):
        raise ProfileError(file, where.rstrip("."), f"expected a table, got {table!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name not in skip}
    for key in table:
        if key not in fields:
            raise ProfileError(file, where + key, unknown_key_message(key, list(fields)))
    kwargs = {}
    for name, field in fields.items():
        if name not in table:
            continue
        try:
            kwargs[name] = coerce(table[name], hints[name], dict(field.metadata))
        except ValueError as err:
            raise ProfileError(file, where + name, str(err)) from None
    return cls(**kwargs)


def to_table(obj: Any) -> dict:
    """A dataclass as a TOML-ready table: tuples become lists, None values are left out."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        if dataclasses.is_dataclass(value):
            value = to_table(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def field(default: Any, **meta: Any) -> Any:
    """A dataclass field with validation metadata (see the module docstring)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple for a list default")
    return dataclasses.field(default=default, metadata=meta)


__all__ = [
    "ProfileError", "build", "coerce", "field", "parse_fraction", "parse_from_end", "parse_percent", "to_table",
    "unknown_key_message", "_type_name",
]
