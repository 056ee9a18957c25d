"""One entry for `fairtui plot` and the app: a kind, runs and options in, a matplotlib Figure out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fairtui.figures import KINDS, PlotError, require_matplotlib
from fairtui.runs.runfolder import RunView

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_PANELS = 8
DEFAULT_WIDTH = {"classes": 6.9, "curves": 6.9, "state": 6.9, "confusion": 3.3, "tradeoff": 3.3}


@dataclass
class PlotRequest:
    kind: str
    attack: str | None = None  # None: each run's first robust attack
    checkpoint: str = "best"
    n_per_class: int = 0  # 0: the whole split (headline results)
    clean: bool = False  # classes: clean bars above the robust; curves: clean accuracy instead
    key: str | None = None  # state: the method_state key (default: the first class-wise one)
    width: float | None = None  # inches (default: two columns, 6.9; one column, 3.3, for confusion, tradeoff)
    by_run: bool = False  # classes, tradeoff: each run a series of its own (runs named one by one)


def build(request: PlotRequest, views: list[RunView]) -> "Figure":
    from fairtui.figures import data, draw

    require_matplotlib()
    kind = request.kind
    if kind not in KINDS:
        raise PlotError(f"unknown figure {kind!r}; choose {', '.join(KINDS)}")
    if not views:
        raise PlotError("name at least one run")
    width = request.width or DEFAULT_WIDTH[kind]
    if not 1.0 <= width <= 20.0:
        raise PlotError(f"--width {width}: inches, between 1 and 20 (3.3 for one column, 6.9 for two)")
    if kind in ("curves", "state") and len(views) > MAX_PANELS:
        raise PlotError(f"{len(views)} runs: a {kind} figure has one panel per run, at most {MAX_PANELS}")
    if kind == "classes":
        return draw.classes(data.results(views, request.attack, request.checkpoint, request.n_per_class,
                                         by_run=request.by_run), width, request.clean)
    if kind == "tradeoff":
        return draw.tradeoff(data.results(views, request.attack, request.checkpoint, request.n_per_class,
                                          same_classes=False, by_run=request.by_run), width)
    if kind == "curves":
        what = "clean" if request.clean else "robust"
        return draw.lines(data.curves(views, request.clean), f"val {what} acc. (%)",
                          f"validation {what} accuracy per class over the epochs; the worst class at the last "
                          "epoch drawn strongest", width)
    if kind == "state":
        key, panels = data.state(views, request.key)
        if all(isinstance(p, data.Heatmap) for p in panels):
            return draw.heatmaps(panels, f"method state {key}", width)
        if any(isinstance(p, data.Heatmap) for p in panels):
            raise PlotError(f"{key!r} is a matrix in some runs and a per-class list in others")
        return draw.lines(panels, key, f"method state {key} per class over the epochs", width, percent=False)
    if len(views) != 1:
        raise PlotError(f"a confusion figure shows one result; got {len(views)} runs")
    hm = data.confusion(views[0], request.attack, request.checkpoint, request.n_per_class)
    return draw.heatmaps([hm], "robustness confusion matrix (rows: true class; % of each row)", width)


def render(request: PlotRequest, views: list[RunView], fmt: str) -> bytes:
    from fairtui.figures import draw

    return draw.to_bytes(build(request, views), fmt)
