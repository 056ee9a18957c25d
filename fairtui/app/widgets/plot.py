"""A line plot in text cells: one line per class across epochs, one class highlighted."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

MARKERS = "o+x*#@%&=~"


class LinePlot(Widget):
    """Trajectories of a class-wise quantity (eps, beta, weights, multipliers) over epochs."""

    DEFAULT_CSS = "LinePlot { height: 16; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = ""
        self.epochs: list[int] = []
        self.series: list[list[float | None]] = []  # one list per line, a value per epoch
        self.labels: list[str] = []
        self.highlight = 0

    def show(self, title: str, epochs: list[int], series: list[list[float | None]], labels: list[str],
             highlight: int = 0) -> None:
        self.title, self.epochs, self.series, self.labels = title, epochs, series, labels
        self.highlight = highlight if 0 <= highlight < len(series) else 0
        self.refresh()

    def points(self) -> int:
        """The number of epochs plotted (for tests: one point per epoch)."""
        return len(self.epochs)

    def render(self) -> Text:
        text = Text(self.title + "\n", style="bold")
        values = [v for s in self.series for v in s if v is not None]
        if not values or not self.epochs:
            return text.append("no class-wise state logged yet")
        height = max(4, self.size.height - 4)
        width = max(10, self.size.width - 10)
        lo, hi = min(values), max(values)
        span = (hi - lo) or 1.0
        grid = [[" "] * width for _ in range(height)]
        styles = [[""] * width for _ in range(height)]
        n = len(self.epochs)
        order = [i for i in range(len(self.series)) if i != self.highlight] + [self.highlight]
        for s in order:
            for j, v in enumerate(self.series[s]):
                if v is None:
                    continue
                col = 0 if n == 1 else round(j * (width - 1) / (n - 1))
                row = height - 1 - round((v - lo) / span * (height - 1))
                hl = s == self.highlight
                grid[row][col] = "●" if hl else MARKERS[s % len(MARKERS)]
                styles[row][col] = "bold red" if hl else "dim"
        for r in range(height):
            label = f"{hi:>8.4g} " if r == 0 else f"{lo:>8.4g} " if r == height - 1 else " " * 9
            text.append(label + "|", style="dim")
            for c in range(width):
                text.append(grid[r][c], style=styles[r][c])
            text.append("\n")
        text.append(" " * 10 + f"epoch {self.epochs[0]}".ljust(width - 8) + f"{self.epochs[-1]}\n", style="dim")
        name = self.labels[self.highlight] if self.labels else str(self.highlight)
        text.append(f"● {name} (highlighted; ←/→ another class)   others: " +
                    " ".join(f"{MARKERS[i % len(MARKERS)]}{self.labels[i]}" for i in range(len(self.labels))
                             if i != self.highlight)[: max(0, self.size.width - 40)], style="")
        return text
