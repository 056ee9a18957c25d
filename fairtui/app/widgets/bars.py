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
    """One row per class: name, robust bar and value, clean bar and value.

    As many classes as the widget's height holds; more (CIFAR-100's 100, or 10 at 80x24) are paged
    (``page``; the run screen's pgup / pgdn), and the worst class is always named, on any page.
    """

    DEFAULT_CSS = "ClassBars { height: 1fr; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.names: list[str] = []
        self.clean: list[float | None] = []
        self.robust: list[float | None] = []
        self.caption = ""
        self.page = 0

    def show(self, names: list[str], clean: list[float | None], robust: list[float | None], caption: str = "") -> None:
        self.names, self.clean, self.robust, self.caption = names, clean, robust, caption
        self.refresh(layout=True)

    def per_page(self) -> int:
        """Classes on one page: all if they fit, else the rows left after the caption, header and worst line."""
        rows = max(1, self.size.height - 2) if self.size.height else len(self.names)
        return len(self.names) if len(self.names) <= rows else max(1, rows - 1)

    def pages(self) -> int:
        n = self.per_page()
        return max(1, -(-len(self.names) // n)) if self.names else 1

    def turn(self, step: int) -> None:
        self.page = (self.page + step) % self.pages()
        self.refresh()

    def visible_classes(self) -> range:
        n = self.per_page()
        self.page = min(self.page, self.pages() - 1)
        return range(self.page * n, min(len(self.names), (self.page + 1) * n))

    def render(self) -> Text:
        text = Text()
        if not self.names or len(self.robust) != len(self.names) or len(self.clean) != len(self.names):
            return text.append(self.caption + "\nwaiting for the first epoch…", style="bold")
        shown = self.visible_classes()
        paged = len(shown) < len(self.names)
        width = self.size.width or 80
        # the page first: it is what a narrow pane must not cut
        caption = (f"{shown.start + 1}-{shown.stop}/{len(self.names)} pgup/dn | " if paged else "") + self.caption
        # every line fits the width: a wrapped line would push the last classes out of view
        text.append((caption if len(caption) <= width else caption[:width - 1] + "…") + "\n", style="bold")
        name_w = min(14, max(len(n) for n in self.names))
        bar_w = max(3, (width - name_w - 21) // 2)  # name, 2 bars, 2 values and the " <" mark
        worst = worst_index(self.robust)
        header = f"{'class':<{name_w}}  {'robust (< worst)':<{bar_w + 7}} clean"
        text.append(header[:width] + "\n", style="dim")
        rows = list(shown)
        if paged and worst is not None and worst not in shown:
            rows.append(worst)  # the worst class, named on every page
        for i in rows:
            name = self.names[i]
            is_worst = i == worst
            r, c = self.robust[i], self.clean[i]
            text.append(f"{name[:name_w]:<{name_w}}  ", style="bold red" if is_worst else "")
            text.append(bar(r, bar_w), style="red" if is_worst else "green")
            text.append(f" {'-' if r is None else f'{r:.3f}'} ", style="bold red" if is_worst else "")
            text.append(bar(c, bar_w), style="blue")
            text.append(f" {'-' if c is None else f'{c:.3f}'}")
            text.append(" <\n" if is_worst else "\n", style="bold red")
        return text


def fit_label(label: str, width: int) -> str:
    """``label`` in ``width`` cells; a run's "name [id]" keeps its id whole and shortens the name."""
    if len(label) <= width:
        return label
    if label.endswith("]") and " [" in label:
        name, ident = label.rsplit(" [", 1)
        room = width - len(ident) - 3  # " [" + "…"
        if room >= 3:
            return f"{name[:room]}… [{ident}"
    return label[:width - 1] + "…"


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
        width = self.size.width or 80
        label_w = min(max(18, width // 3), max((len(label) for label, _ in self.runs), default=4))
        bar_w = max(6, width - label_w - 12)
        worst = {label: worst_index(values) for label, values in self.runs}
        for i, name in enumerate(self.names):
            text.append(f"{name}\n", style="bold")
            for label, values in self.runs:
                v = values[i]
                mark = worst[label] == i
                text.append(f"  {fit_label(label, label_w):<{label_w}} ")
                text.append(bar(v, bar_w), style="red" if mark else "green")
                text.append(f" {'-' if v is None else f'{v:.3f}'}" + (" <" if mark else "") + "\n",
                            style="bold red" if mark else "")
        return text
