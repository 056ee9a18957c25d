"""Per-class accuracy bars: robust next to clean for each class, the worst class marked."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(value: float | None, width: int) -> str:
    """A horizontal bar of ``width`` cells for a fraction in [0, 1], with eighth-cell resolution."""
    if value is None:
        return "·" * width
    eighths = int(round(max(0.0, min(1.0, value)) * width * 8))
    full, part = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[part] if part else "")).ljust(width)


def worst_index(values: list[float | None]) -> int | None:
    pairs = [(v, i) for i, v in enumerate(values) if v is not None]
    return min(pairs)[1] if pairs else None


class ClassBars(Widget):
    """One row per class: name, robust bar and value, clean bar and value."""

    DEFAULT_CSS = "ClassBars { height: auto; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.names: list[str] = []
        self.clean: list[float | None] = []
        self.robust: list[float | None] = []
        self.caption = ""

    def show(self, names: list[str], clean: list[float | None], robust: list[float | None], caption: str = "") -> None:
        self.names, self.clean, self.robust, self.caption = names, clean, robust, caption
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.names) + 2

    def render(self) -> Text:
        text = Text()
        text.append(self.caption + "\n", style="bold")
        if not self.names or len(self.robust) != len(self.names) or len(self.clean) != len(self.names):
            return text.append("waiting for the first epoch…")
        name_w = min(14, max(len(n) for n in self.names))
        bar_w = max(6, (self.size.width - name_w - 26) // 2)
        worst = worst_index(self.robust)
        text.append(f"{'class':<{name_w}}  {'robust':<{bar_w + 6}}  clean\n", style="dim")
        for i, name in enumerate(self.names):
            is_worst = i == worst
            r, c = self.robust[i], self.clean[i]
            text.append(f"{name[:name_w]:<{name_w}}  ", style="bold red" if is_worst else "")
            text.append(bar(r, bar_w), style="red" if is_worst else "green")
            text.append(f" {'-' if r is None else f'{r:.3f}'}  ", style="bold red" if is_worst else "")
            text.append(bar(c, bar_w), style="blue")
            text.append(f" {'-' if c is None else f'{c:.3f}'}")
            text.append("  < worst\n" if is_worst else "\n", style="bold red")
        return text


class GroupedBars(Widget):
    """Per class, one robust bar per run (the compare screen)."""

    DEFAULT_CSS = "GroupedBars { height: auto; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.names: list[str] = []
        self.runs: list[tuple[str, list[float | None]]] = []

    def show(self, names: list[str], runs: list[tuple[str, list[float | None]]]) -> None:
        self.names, self.runs = names, runs
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.names) * (len(self.runs) + 1)

    def render(self) -> Text:
        text = Text()
        label_w = min(18, max((len(label) for label, _ in self.runs), default=4))
        bar_w = max(6, self.size.width - label_w - 12)
        worst = {label: worst_index(values) for label, values in self.runs}
        for i, name in enumerate(self.names):
            text.append(f"{name}\n", style="bold")
            for label, values in self.runs:
                v = values[i]
                mark = worst[label] == i
                text.append(f"  {label[:label_w]:<{label_w}} ")
                text.append(bar(v, bar_w), style="red" if mark else "green")
                text.append(f" {'-' if v is None else f'{v:.3f}'}" + (" <" if mark else "") + "\n",
                            style="bold red" if mark else "")
        return text
