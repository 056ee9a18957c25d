"""Drawing the figures with matplotlib's object API (no pyplot, no window, no global figure state), at
the sizes of a paper: ``width`` in inches (3.3 for one column, 6.9 for two), 8 pt text, the Okabe-Ito
colours (safe for the common colour-vision deficiencies), fonts embedded as TrueType in PDFs, and files
that do not change when drawn again (no dates, fixed SVG ids).

Every figure carries what its numbers are at the top: attack, eps, subset and checkpoint (a caption).
"""

from __future__ import annotations

import io
import math
from contextlib import contextmanager
from typing import TYPE_CHECKING

from fairtui.figures.data import Heatmap, Panel, ResultFigure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Okabe and Ito (2008), blue first; yellow late, since it is faint on white
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")
LINESTYLES = ("-", "--", ":", "-.")
RC = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7,
      "ytick.labelsize": 7, "figure.titlesize": 8, "pdf.fonttype": 42, "ps.fonttype": 42,
      "svg.hashsalt": "fairtui", "axes.spines.top": False, "axes.spines.right": False}
MANY_CLASSES = 10  # above this, per-class lines are drawn grey, with the worst class and the mean in colour
WORST_HATCH = "////"


@contextmanager
def paper_style():
    import matplotlib

    with matplotlib.rc_context(RC):
        yield


def _new_figure(width: float, height: float) -> "Figure":
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _wrap(text: str, width: float, size: float = 8.0) -> str:
    """``text`` broken into lines that fit ``width`` inches at ``size`` points (about 0.55 em a character)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, max(20, int(width * 72 / (size * 0.55)))))


def _legend_columns(labels: list[str], width: float, size: float = 7.0) -> int:
    """As many legend columns (at most 4) as the longest label lets fit in ``width`` inches: a long label (a
    method's full name with its seeds) otherwise pushes the legend past the figure's edges."""
    longest = max((len(label) for label in labels), default=0) * size * 0.55 / 72 + 0.5  # text, handle, gap
    return max(1, min(len(labels), 4, int(width / longest)))


def _pct(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else 100.0 * v for v in values]


def classes(data: ResultFigure, width: float = 6.9, clean: bool = False) -> "Figure":
    """Grouped per-class bars (robust; clean above it on request), one colour per series, each series'
    worst class hatched, error bars for the std over seeds."""
    with paper_style():
        rows = ["clean", "robust"] if clean else ["robust"]
        k, n = len(data.class_names), len(data.series)
        fig = _new_figure(width, 1.9 * len(rows) + 0.7)
        axes = fig.subplots(len(rows), 1, sharex=True, squeeze=False)[:, 0]
        group = 0.8
        bar_w = group / n
        for ax, which in zip(axes, rows):
            for j, s in enumerate(data.series):
                mean, std = s.per_class(which)
                xs = [i - group / 2 + bar_w * (j + 0.5) for i in range(k)]
                err = _pct(std) if len(s.runs) > 1 else None
                bars = ax.bar(xs, _pct(mean), bar_w, yerr=err, color=PALETTE[j], edgecolor="black", linewidth=0.3,
                              label=data.legend_label(s), error_kw={"elinewidth": 0.6, "capsize": 1.0})
                if which == "robust":
                    worst = bars.patches[s.worst_class]
                    worst.set_hatch(WORST_HATCH)
                    worst.set_gid(f"worst-{j}")
            ax.set_ylabel(f"{which} acc. (%)")
            ax.set_ylim(0, 100)
            ax.grid(axis="y", linewidth=0.3, alpha=0.5)
            ax.set_axisbelow(True)
        long_names = max((len(c) for c in data.class_names), default=0) > 5
        axes[-1].set_xticks(range(k), data.class_names, rotation=45 if long_names else 0,
                            ha="right" if long_names else "center")
        handles, labels = axes[-1].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=_legend_columns(labels, width), frameon=False)
        fig.suptitle(_wrap(f"{data.caption}; hatched: each series' worst class", width), fontstyle="italic")
    return fig


def tradeoff(data: ResultFigure, width: float = 3.3) -> "Figure":
    """Average against worst-class robust accuracy, one point per series (std over seeds as error bars)."""
    with paper_style():
        fig = _new_figure(width, width * 0.85 + 0.5)
        ax = fig.subplots()
        for j, s in enumerate(data.series):
            (x, dx), (y, dy) = s.summary("avg_robust"), s.summary("worst_robust")
            ax.errorbar([100 * x], [100 * y], xerr=[100 * dx] if len(s.runs) > 1 else None,
                        yerr=[100 * dy] if len(s.runs) > 1 else None, fmt="o", color=PALETTE[j], markersize=4,
                        elinewidth=0.6, capsize=1.5, label=data.legend_label(s), gid=f"point-{j}")
        ax.set_xlabel("average robust acc. (%)")
        ax.set_ylabel("worst-class robust acc. (%)")
        ax.grid(linewidth=0.3, alpha=0.5)
        fig.legend(loc="outside lower center", ncols=1 if width < 5 else 2, frameon=False)
        fig.suptitle(_wrap(data.caption, width), fontstyle="italic")
    return fig


def forest(rows: list[dict], caption: str, width: float = 6.9) -> "Figure":
    """The paired differences against a baseline group, one row per method: the mean difference (points) and its
    95% t-interval, a panel per metric (worst class, average), a line at 0. ``rows``: `compare --json`'s
    ``paired`` entries, in the order to draw."""
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    labels = list(dict.fromkeys(r["group"] for r in rows))
    titles = {"worst_robust": "worst-class robust acc.", "avg_robust": "average robust acc."}
    with paper_style():
        fig = _new_figure(width, 0.6 + 0.22 * len(labels) + 0.45)
        axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
        for ax, metric in zip(axes, metrics):
            for i, label in enumerate(labels):
                entry = next((r for r in rows if r["group"] == label and r["metric"] == metric), None)
                if entry is None or entry["mean"] is None:
                    continue
                y = len(labels) - 1 - i
                lo, hi = entry["ci95"]
                colour = PALETTE[0] if entry["verdict"] == "better" else PALETTE[3] if entry["verdict"] == "worse" \
                    else "#555555"
                if lo is not None and hi is not None:
                    ax.plot([100 * lo, 100 * hi], [y, y], color=colour, linewidth=1.0, gid=f"ci-{metric}-{i}")
                ax.plot([100 * entry["mean"]], [y], "o", color=colour, markersize=3.5, gid=f"mean-{metric}-{i}")
            ax.axvline(0, color="black", linewidth=0.6)
            ax.set_xlabel(f"{titles.get(metric, metric)}: difference (points)")
            ax.grid(axis="x", linewidth=0.3, alpha=0.5)
        names = [f"{label} (n={next(r['n'] for r in rows if r['group'] == label)})" for label in labels]
        axes[0].set_yticks(range(len(labels) - 1, -1, -1), names)
        fig.suptitle(_wrap(caption, width), fontstyle="italic")
    return fig


def _grid(fig: "Figure", n: int, sharey: bool = True):
    cols = 1 if n == 1 else 2
    rows = math.ceil(n / cols)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return axes[:n]


def lines(panels: list[Panel], ylabel: str, caption: str, width: float = 6.9, percent: bool = True) -> "Figure":
    """Per-class values over the epochs, one panel per run. Up to 10 classes each has its colour and line
    style; with more, every class is a thin grey line and the highlighted class and the mean stand out."""
    with paper_style():
        cols = 1 if len(panels) == 1 else 2
        fig = _new_figure(width, 1.9 * math.ceil(len(panels) / cols) + 0.6)
        axes = _grid(fig, len(panels), sharey=percent)
        for ax, panel in zip(axes, panels):
            scale = _pct if percent else (lambda vs: [math.nan if v is None else v for v in vs])
            many = len(panel.series) > MANY_CLASSES + 1
            for i, (values, label) in enumerate(zip(panel.series, panel.labels)):
                strong = i == panel.highlight
                if label == "overall":  # WAT's overall entry, before the classes
                    style = {"color": "black", "linestyle": "--", "linewidth": 1.0}
                elif many:
                    style = {"color": PALETTE[3] if strong else "0.7", "linewidth": 1.4 if strong else 0.4}
                else:
                    style = {"color": PALETTE[i % len(PALETTE)], "linestyle": LINESTYLES[i // len(PALETTE)],
                             "linewidth": 1.6 if strong else 0.8}
                name = f"{label} (worst)" if strong else label
                ax.plot(panel.epochs, scale(values), label=name if not many or strong or label == "overall" else None,
                        gid=f"class-{i}", **style)
            if many:
                mean = [_mean([s[t] for s in panel.series]) for t in range(len(panel.epochs))]
                ax.plot(panel.epochs, scale(mean), color="black", linewidth=1.2, label="mean over classes")
            ax.set_title(_wrap(panel.title, width / cols))
            ax.set_xlabel("epoch")
            ax.set_ylabel(ylabel)
            ax.grid(linewidth=0.3, alpha=0.5)
            ax.legend(loc="best", ncols=2 if len(panel.series) > 5 and not many else 1, frameon=False,
                      fontsize=6, handlelength=1.5)
        fig.suptitle(_wrap(caption, width), fontstyle="italic")
    return fig


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def heatmaps(maps: list[Heatmap], caption: str, width: float = 3.3) -> "Figure":
    """K x K matrices with the class names on both axes; the values written in the cells up to 12 classes."""
    with paper_style():
        cols = 1 if len(maps) == 1 else 2
        fig = _new_figure(width, width / cols * math.ceil(len(maps) / cols) * 0.95 + 0.5)
        axes = _grid(fig, len(maps), sharey=False)
        for ax, hm in zip(axes, maps):
            k = len(hm.class_names)
            image = ax.imshow(hm.matrix, cmap="viridis", vmin=0, vmax=100 if hm.percent else None)
            ax.set_xticks(range(k), hm.class_names, rotation=90 if k > 3 else 0, fontsize=6)
            ax.set_yticks(range(k), hm.class_names, fontsize=6)
            ax.set_xlabel(hm.col_label)
            ax.set_ylabel(hm.row_label)
            ax.set_title(_wrap(hm.title, width / cols * 0.8))
            ax.spines[:].set_visible(False)
            if k <= 12:
                top = max((v for row in hm.matrix for v in row), default=1) or 1
                for r, row in enumerate(hm.matrix):
                    for c, v in enumerate(row):
                        ax.text(c, r, f"{v:.0f}" if hm.percent else f"{v:.2g}", ha="center", va="center",
                                fontsize=5, color="black" if v > 0.6 * (100 if hm.percent else top) else "white")
            fig.colorbar(image, ax=ax, shrink=0.8, label="% of the row" if hm.percent else None)
        fig.suptitle(_wrap(caption, width), fontstyle="italic")
    return fig


def study(doc: dict, key: str | None, width: float = 6.9) -> "Figure":
    """A tuning study (fairtui.tune.study.summary): the objective of each trial in order, with the best so far, and
    the objective against one parameter (``key``; default the first of the space). Pruned and failed trials
    are marked at the bottom: they have no value."""
    from fairtui.figures import PlotError

    space = doc["space"]
    key = key or next(iter(space), None)
    if key not in space:
        raise PlotError(f"study {doc['study']} searches {', '.join(space) or 'nothing'}; --key {key!r} is not one")
    done = [r for r in doc["trials"] if r["state"] == "complete" and r["value"] is not None]
    if not done:
        raise PlotError(f"study {doc['study']} has no completed trial yet")
    with paper_style():
        fig = _new_figure(width, 0.42 * width)
        ax, bx = fig.subplots(1, 2)
        xs, ys = [r["trial"] for r in done], [r["value"] for r in done]
        ax.plot(xs, ys, "o", color=PALETTE[0], ms=3, label="completed")
        best, steps = -math.inf, []
        for y in ys:
            best = max(best, y)
            steps.append(best)
        ax.step(xs, steps, where="post", color=PALETTE[3], lw=1, label="best so far")
        floor = min(ys)
        others = [r for r in doc["trials"] if r["state"] in ("pruned", "fail")]
        if others:
            ax.plot([r["trial"] for r in others], [floor] * len(others), "x", color=PALETTE[7], ms=3,
                    label="pruned or failed")
        from matplotlib.ticker import FormatStrFormatter, LogLocator, MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trial")
        ax.set_ylabel(doc["objective"])
        ax.legend(frameon=False)
        values = [r["params"].get(key) for r in done]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if numeric:
            bx.plot(values, ys, "o", color=PALETTE[0], ms=3)
            if space[key].endswith(":log"):
                bx.set_xscale("log")
                # a range within a decade has no major tick: label 1, 2 and 5 times powers of ten, plainly
                bx.xaxis.set_minor_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                bx.xaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
        else:
            labels = sorted({str(v) for v in values})
            bx.plot([labels.index(str(v)) for v in values], ys, "o", color=PALETTE[0], ms=3)
            bx.set_xticks(range(len(labels)), labels)
        bx.set_xlabel(key)
        fig.suptitle(_wrap(f"study {doc['study']}: {doc['objective']} on the validation split, {len(done)} of "
                           f"{doc['budget']} trials completed", width))
    return fig


def to_bytes(fig: "Figure", fmt: str) -> bytes:
    """The figure as a PDF, SVG or PNG (300 dpi) file's bytes, with no date in them."""
    metadata = {"pdf": {"Creator": "fairtui", "Producer": "fairtui", "CreationDate": None},
                "svg": {"Creator": "fairtui", "Date": None}, "png": {"Software": "fairtui"}}[fmt]
    buf = io.BytesIO()
    with paper_style():
        fig.savefig(buf, format=fmt, dpi=300, metadata=metadata)
    return buf.getvalue()
