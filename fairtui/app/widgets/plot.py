"""Per-class curves over epochs (accuracies, margins, betas, weights, multipliers), drawn by plotext.

textual-plotext draws the lines in braille; one class is highlighted (left / right), the worst class
at the last epoch is drawn in red, the others are dim. Only those two are named, so the legend fits.
"""

from __future__ import annotations

from textual_plotext import PlotextPlot


def worst_series(series: list[list[float | None]]) -> int | None:
    """The series with the lowest last value (the worst class for an accuracy)."""
    last = [(s[-1], i) for i, s in enumerate(series) if s and s[-1] is not None]
    return min(last)[1] if last else None


class LinePlot(PlotextPlot):
    """Trajectories of one per-class quantity over epochs, one class highlighted."""

    DEFAULT_CSS = "LinePlot { height: 1fr; min-height: 8; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = ""
        self.epochs: list[int] = []
        self.series: list[list[float | None]] = []  # one list per line, a value per epoch
        self.labels: list[str] = []
        self.highlight = 0
        self.xlabel, self.navigable = "epoch", True

    def show(self, title: str, epochs: list[int], series: list[list[float | None]], labels: list[str],
             highlight: int = 0, xlabel: str = "epoch", navigable: bool = True) -> None:
        """``navigable``: left / right move the highlight (the run screen's classes), said in its label."""
        self.title, self.epochs, self.series, self.labels = title, epochs, series, labels
        self.xlabel, self.navigable = xlabel, navigable
        self.highlight = highlight if 0 <= highlight < len(series) else 0
        self.replot()

    def points(self) -> int:
        """The number of epochs plotted (for tests: one point per epoch)."""
        return len(self.epochs)

    def worst(self) -> int | None:
        return worst_series(self.series) if "accuracy" in self.title else None

    def replot(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self.title)
        if not self.series or not self.epochs:
            plt.title(self.title or "no per-class values logged yet")
            self.refresh()
            return
        worst = self.worst()
        order = [i for i in range(len(self.series)) if i not in (self.highlight, worst)]
        order += [i for i in (worst, self.highlight) if i is not None]
        for i in dict.fromkeys(order):
            points = [(e, v) for e, v in zip(self.epochs, self.series[i]) if v is not None]
            if not points:
                continue
            xs, ys = zip(*points)
            name = self.labels[i] if i < len(self.labels) else str(i)
            if i == self.highlight:
                plt.plot(xs, ys, marker="braille", color="cyan", label=f"{name} (←/→)" if self.navigable else name)
            elif i == worst:
                plt.plot(xs, ys, marker="braille", color="red", label=f"{name} (worst)")
            else:
                plt.plot(xs, ys, marker="braille", color="gray", label=None if self.navigable else name)
        plt.xlabel(self.xlabel)
        plt.xticks(whole_ticks(self.epochs))  # epochs and trials are whole numbers: no 0.50 to 1.50 axis
        if len(set(self.epochs)) == 1:
            plt.xlim(self.epochs[0] - 1, self.epochs[0] + 1)
        self.refresh()


def whole_ticks(xs: list[int], most: int = 8) -> list[int]:
    """At most ``most`` whole-number ticks from the first x to the last, evenly spaced, the last one included."""
    if not xs:
        return []
    lo, hi = int(min(xs)), int(max(xs))
    step = max(1, -(-(hi - lo) // max(1, most - 1)))
    ticks = list(range(lo, hi + 1, step))
    if ticks[-1] != hi:
        ticks[-1 if len(ticks) >= most else len(ticks):] = [hi]
    return ticks
