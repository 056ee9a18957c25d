"""Publication figures from runs (`fairtui plot`): what is drawn is chosen here, how it is drawn in
:mod:`fairtui.figures.draw` (matplotlib, the optional extra ``fairtui[plots]``).

The kinds are the figures every paper of the field has: ``classes`` (grouped per-class bars, CFA Fig. 1,
WAT Fig. 1, FRL Fig. 1, Tian et al. Fig. 1), ``curves`` (per-class validation accuracy over the epochs),
``state`` (a method's class-wise state over the epochs), ``confusion`` (the robustness confusion matrix,
Tian et al. Fig. 2) and ``tradeoff`` (average against worst-class robust accuracy).
"""

from __future__ import annotations

KINDS = ("classes", "curves", "state", "confusion", "tradeoff")
FORMATS = {".pdf": "pdf", ".svg": "svg", ".png": "png"}
EXTRA = "pip install 'fairtui[plots]'"


class PlotError(ValueError):
    """A figure that cannot be drawn as asked; the message says why, in one line."""


def require_matplotlib() -> None:
    """Raise PlotError with the extra to install when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError(f"figures need matplotlib, which is not installed: {EXTRA}") from None


def figure_format(path: str) -> str:
    """pdf, svg or png, from the suffix of ``-o``."""
    from pathlib import PurePath

    suffix = PurePath(path).suffix.lower()
    if suffix not in FORMATS:
        raise PlotError(f"-o {path}: the suffix chooses the format: .pdf, .svg or .png")
    return FORMATS[suffix]
