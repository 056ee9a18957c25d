"""Render export rows as CSV, Markdown, LaTeX or JSON: numbers in percent, mean ± std over seeds."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from fairtui.judge.compare import EXPORT_METRICS, ExportRow
from fairtui.runs.usertext import csv_cell, inert, latex, md_cell

HEADERS = {"avg_clean": "Clean avg", "avg_robust": "Robust avg", "worst_robust": "Robust worst",
           "worst20_robust": "Robust worst-20%", "cv": "CV", "mcd": "MCD"}


def _cell(row: ExportRow, key: str, plus_minus: str) -> str:
    mean, std = row.mean_std(key)
    if math.isnan(mean):
        return "-"
    scale, digits = (1e4, 1) if key == "cv" else (100, 1)  # CV in Tian et al.'s percent^2 units
    text = f"{mean * scale:.{digits}f}"
    if len(row.runs) > 1:
        text += f"{plus_minus}{std * scale:.{digits}f}"
    return text


SHORT_HEADERS = {"avg_clean": "clean", "avg_robust": "robust", "worst_robust": "worst", "worst20_robust": "worst20%",
                 "cv": "CV", "mcd": "MCD"}
FRACTION_UNITS = "fractions in [0, 1]; CV (class-wise variance, not std/mean) in fraction^2"


def caption(rows: list[ExportRow], checkpoint: str) -> tuple[str, bool]:
    """The table's attack and settings at `checkpoint` ("pgd20, eps 0.2, whole split @ best"), and
    whether the rows' settings differ (then every row names its own)."""
    settings = list(dict.fromkeys(r.setting for r in rows))
    if len(settings) == 1:
        return f"{settings[0]} @ {checkpoint}", False
    return f"settings differ between rows (each row names its own) @ {checkpoint}", True


def set_aside_lines(rows: list[ExportRow]) -> list[str]:
    """One line for each replicate a row set aside: a second run of a seed the row already holds."""
    return [f"set aside from {r.label} (a replicate, not a seed): {line}" for r in rows for line in r.set_aside]


def render(rows: list[ExportRow], fmt: str, checkpoint: str) -> str:
    title, mixed = caption(rows, checkpoint)
    label = (lambda r: f"{r.label} [{r.setting}]") if mixed else (lambda r: r.label)  # noqa: E731
    if fmt == "json":
        return json.dumps({"checkpoint": checkpoint, "setting": None if mixed else rows[0].setting if rows else None,
                           "settings_differ": mixed, "units": FRACTION_UNITS,
                           "rows": [{"label": r.label, "runs": r.runs, "setting": r.setting, "set_aside": r.set_aside,
                                     **{k: {"mean": r.mean_std(k)[0], "std": r.mean_std(k)[1], "values": r.values[k]}
                                        for k in EXPORT_METRICS}} for r in rows]}, indent=1)
    header = ["Method"] + [HEADERS[k] for k in EXPORT_METRICS]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(["label", "n_runs", "setting", "checkpoint", "units"]
                        + [f"{k}_{s}" for k in EXPORT_METRICS for s in ("mean", "std")] + ["set_aside"])
        for r in rows:
            writer.writerow([csv_cell(r.label), len(r.runs), csv_cell(r.setting), checkpoint, FRACTION_UNITS]
                            + [f"{v:.6g}" for k in EXPORT_METRICS for v in r.mean_std(k)]
                            + [csv_cell("; ".join(r.set_aside))])
        return buf.getvalue()
    if fmt == "md":
        lines = [f"{title}; accuracies in %, CV (class-wise variance) in %^2", "",
                 "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join([md_cell(label(r))] + [_cell(r, k, " ± ") for k in EXPORT_METRICS]) + " |"
                  for r in rows]
        aside = set_aside_lines(rows)
        lines += ["", *(md_cell(line) for line in aside)] if aside else []
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        esc = latex
        lines = [f"% {inert(title)}; accuracies in percent, CV (class-wise variance) in percent^2",  # a comment to the line's end
                 r"\begin{tabular}{l" + "r" * len(EXPORT_METRICS) + "}", r"\toprule",
                 " & ".join(esc(h) for h in header) + r" \\", r"\midrule"]
        lines += [" & ".join([esc(label(r))] + [_cell(r, k, r" $\pm$ ") for k in EXPORT_METRICS]) + r" \\"
                  for r in rows]
        lines += [r"\bottomrule", r"\end{tabular}"]
        lines += [f"% {inert(line)}" for line in set_aside_lines(rows)]
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose csv, md, latex or json")


def terminal_table(rows: list[ExportRow], checkpoint: str):
    """The export table for a terminal (Rich): numbers kept whole (``71.2±0.7``), the labels wrap instead,
    so it fits 80 columns without cutting a cell."""
    from rich import box
    from rich.table import Table

    title, mixed = caption(rows, checkpoint)
    table = Table(title=f"{title}; accuracies in %, CV (class-wise variance) in %^2", title_justify="left", box=box.SIMPLE_HEAD,
                  padding=(0, 0, 0, 1), pad_edge=False)
    table.add_column("method", overflow="fold", min_width=12)
    for key in EXPORT_METRICS:
        table.add_column(SHORT_HEADERS[key], justify="right", no_wrap=True)
    for r in rows:
        table.add_row(f"{r.label} [{r.setting}]" if mixed else r.label, *[_cell(r, k, "±") for k in EXPORT_METRICS])
    if set_aside_lines(rows):
        table.caption, table.caption_justify = "\n".join(set_aside_lines(rows)), "left"
    return table


class OutputError(ValueError):
    """Where an export may not be written: the message says why, in one line."""


def outside_home(target: Path, home: Path) -> Path:
    """``target`` resolved, unless it lies in the fairtui home (where the runs' own files live)."""
    resolved, home_dir = target.expanduser().resolve(), home.expanduser().resolve()
    if resolved == home_dir or home_dir in resolved.parents:
        raise OutputError(f"-o {target}: inside the fairtui home {home_dir}, where the runs' own files live; "
                          "write it elsewhere")
    return resolved


def special_file(path: Path) -> str | None:
    """What ``path`` (its links followed) is when it is neither a regular file, nor a folder, nor absent."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in ((stat.S_ISCHR, "character device"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return None


def write_output(target: Path, text: str | bytes, home: Path, force: bool = False) -> Path:
    """Write an export (text, or a figure's bytes) to ``target``, never inside the fairtui home (a run's own files live there), never
    over an existing file unless ``force``, atomically (a failed write leaves the old file whole). A character
    device or a FIFO is written into, as a shell's redirection would; a block device or a socket is refused."""
    import os

    target = target.expanduser()
    resolved = outside_home(target, home)
    special = special_file(target)
    if special in ("block device", "socket"):
        raise OutputError(f"-o {target}: is a {special}; give a file name")
    if special is not None:  # a character device or a FIFO (/dev/null, /dev/stdout, a pipe): written into, never
        try:                  # replaced (a rename would swap the device node for a regular file)
            with open(target, "wb" if isinstance(text, bytes) else "w") as fh:
                fh.write(text)
        except OSError as err:
            raise OutputError(f"-o {target}: not written: {err.strerror or err}") from None
        return target
    if resolved.is_dir():
        raise OutputError(f"-o {target}: is a folder; give a file name")
    if not resolved.parent.is_dir():
        raise OutputError(f"-o {target}: no such folder: {resolved.parent}")
    if resolved.exists() and not force:
        raise OutputError(f"-o {target}: exists; --force overwrites it")
    import tempfile

    tmp = None
    try:
        # Created exclusively (O_EXCL) under an unpredictable name in the target's folder: a link planted there
        # beforehand cannot redirect the write, and the rename replaces the target itself, never a link's target.
        fd, name = tempfile.mkstemp(prefix=f".{resolved.name}.", suffix=".fairtui-tmp", dir=resolved.parent)
        tmp = Path(name)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text if isinstance(text, bytes) else text.encode())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, resolved)
    except OSError as err:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise OutputError(f"-o {target}: not written: {err.strerror or err}") from None
    return resolved


def _umask() -> int:
    """The process's umask (mkstemp makes files 0600; an export gets the mode a plain write would give it)."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
