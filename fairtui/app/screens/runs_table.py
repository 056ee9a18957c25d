"""What the runs screen's table shows of a run: its columns, which fit the terminal's width, a row's cells
(the headline numbers, the ETA of a running run, where it runs), a sweep's progress, the sort keys."""

from __future__ import annotations

import time

from fairtui.runs.store import headline as pick_headline

# The most important columns first, so that 80 columns show them whole (name, status, epoch, robust
# average and worst, the short id); the rest are shown as far as the terminal's width allows, dropped
# from the end when it is narrower and back when it grows (fitting_columns).
COLUMNS = [("mark", ""), ("name", "name"), ("status", "status"), ("epoch", "epoch"), ("avg_robust", "robust"),
           ("worst_robust", "worst"), ("id", "id"), ("method", "method"), ("dataset", "data"), ("model", "model"),
           ("gpus", "gpus"), ("started", "started")]
SORTABLE = ["started", "name", "method", "dataset", "status", "avg_robust", "worst_robust", "sweep"]
NAME_WIDTH = 28  # longer names end in an ellipsis here (whole on the run screen and in `ls --wide`)
ESSENTIAL = 7  # mark, name, status, epoch, robust, worst, id: shown at any width (the table scrolls)


def column_widths(rows: list[tuple]) -> list[int]:
    """Each column's width in cells, padded by one on either side: its widest cell or its label, and at
    least one cell (marking a run keeps the columns as they are)."""
    from rich.cells import cell_len

    return [max([1, cell_len(label)] + [cell_len(row[i]) for row in rows]) + 2 for i, (_, label) in enumerate(COLUMNS)]


def fitting_columns(rows: list[tuple], width: int, widths: list[int] | None = None) -> list[int]:
    """The indices of COLUMNS that fit in ``width`` cells with these rows: the essentials always, then
    the others in priority order until one does not fit (each cell is padded by one on either side)."""
    widths = widths or column_widths(rows)
    shown, used = [], 0
    for i, w in enumerate(widths):
        if i >= ESSENTIAL and used + w > width:
            break
        shown.append(i)
        used += w
    return shown


def cells(row: tuple, shown: list[int]) -> list[str]:
    """A row's cells for the table, which reads a cell as Rich markup: names and the rest are text."""
    from rich.markup import escape

    return [escape(row[i]) for i in shown]


def headline(doc: dict) -> dict:
    return pick_headline(doc)[1] or {}


def row_for(doc: dict, marked: bool) -> tuple:
    """A run's row as plain text (the table escapes it: `cells`)."""
    from fairtui.runs.home import short_id
    from fairtui.runs.usertext import inert

    h = headline(doc)
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    started = time.strftime("%m-%d %H:%M", time.localtime(doc["started"])) if doc.get("started") else "-"
    name = inert(doc.get("name") or doc["run_id"])
    if len(name) > NAME_WIDTH:
        name = name[:NAME_WIDTH - 1] + "…"
    epoch = "-" if doc.get("status") == "imported" else f"{doc.get('epoch', 0)}/{doc.get('epochs', 0)}"
    if doc.get("status") == "running":
        eta = doc_eta(doc)
        epoch += f" ~{eta}" if eta else ""
    robust, worst = fmt(h.get("avg_robust")), fmt(h.get("worst_robust"))
    if not h and doc.get("val"):  # no test result yet: the latest validation numbers, marked v
        val = doc["val"]
        robust, worst = (f"{fmt(val.get(k))}v" if val.get(k) is not None else "-" for k in ("avg_robust", "worst_robust"))
    return ("*" if marked else "", name, doc.get("status") or "", epoch, robust, worst, short_id(doc["run_id"]),
            doc.get("method") or "", doc.get("dataset") or "", doc.get("model") or "", where(doc), started)


def doc_eta(doc: dict) -> str:
    """A running run's time to the end of training, short ("12m", "2h05"), from its index document."""
    from fairtui.runs.runstate import run_eta

    times = doc.get("epoch_times") or []
    epochs = [{"epoch": doc.get("epoch", 0), "time_s": t, "t": doc.get("epoch_t")} for t in times]
    eta = run_eta(epochs, doc.get("epochs", 0)) if epochs else None
    if eta is None:
        return ""
    m = int(eta // 60)
    return f"{m // 60}h{m % 60:02d}" if m >= 60 else f"{m}m" if m else "<1m"


def where(doc: dict) -> str:
    """GPUs for local runs; the Slurm job and node (or 'pending') for cluster runs."""
    if doc.get("launcher") == "slurm":
        return f"slurm {doc.get('slurm_job_id') or '?'}" + (f"@{doc['node']}" if doc.get("node") else " pending")
    return doc.get("gpus") or ""


def sweep_progress(docs: list[dict]) -> str:
    """'sweep a1b2c3 3/8 done, 2 running' for every sweep with unfinished children."""
    from fairtui.runs.home import short_id

    sweeps: dict[str, list[dict]] = {}
    for d in docs:
        if d.get("sweep"):
            sweeps.setdefault(d["sweep"], []).append(d)
    parts = []
    for sweep_id, children in sorted(sweeps.items()):
        done = sum(c.get("status") in ("completed", "failed", "stopped", "lost") for c in children)
        if done < len(children):
            running = sum(c.get("status") == "running" for c in children)
            parts.append(f"sweep {short_id(sweep_id)} {done}/{len(children)} done, {running} running")
    return "; ".join(parts)


def sort_key(doc: dict, column: str):
    if column in ("avg_robust", "worst_robust"):
        value = headline(doc).get(column)
        return -1.0 if value is None else value
    if column == "started":
        return doc.get("started") or doc.get("created") or 0
    if column == "sweep":  # groups a sweep's children together, in name order
        return (doc.get("sweep") or "", doc.get("name") or "")
    return str(doc.get(column) or "")


def matches(doc: dict, text: str) -> bool:
    """Whether a run is shown under the filter ``text``: in its name, method, dataset, status, id, model or
    one of its tags, ignoring case."""
    needle = text.lower()
    return not needle or needle in " ".join(str(doc.get(k) or "") for k in (
        "name", "method", "dataset", "status", "run_id", "model")).lower() or any(
        needle in t.lower() for t in doc.get("tags") or [])


def counts_line(docs: list[dict], shown: int, marked: int, column: str, reverse: bool, width: int) -> str:
    """The status line: the counts, then the sweeps' progress, then the sort, each only where it fits
    whole in ``width`` (never a cut "| swe…"), so that 80 columns keep the sweeps before the sort."""
    from fairtui.runs.usertext import count

    running = sum(d.get("status") == "running" for d in docs)
    queued = sum(d.get("status") == "queued" for d in docs)
    line = f"{shown} of {count(len(docs), 'run')}, {running} running, {queued} queued"
    line += f", {marked} marked" if marked else ""
    for sep, extra in ((" | ", sweep_progress(docs)), ("; ", f"sorted by {column}{' (desc)' if reverse else ''}")):
        if extra and len(line) + len(sep) + len(extra) <= width:
            line += sep + extra
    return line


def study_of(doc: dict) -> str | None:
    """The study a run is a trial of (its `study:NAME` tag, set by `fairtui tune`), or None."""
    return next((t.split(":", 1)[1] for t in doc.get("tags") or [] if t.startswith("study:")), None)


def wait_line(reason: str, name: str, width: int) -> str:
    """A queued run's status line: the reason and its fix whole (80 columns hold them), then ": name" as far as
    the line has room (cut with "…"), or not at all where fewer than six columns are left: the table above names
    the run, and a cut line must not end on a dangling colon."""
    room = width - 2 - len(reason) - 2  # the line's padding, then ": "
    if room >= len(name):
        return f"{reason}: {name}"
    return f"{reason}: {name[:room - 1]}…" if room >= 6 else reason
