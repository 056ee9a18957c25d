"""Render export rows as CSV, Markdown, LaTeX or JSON: numbers in percent, mean ± std over seeds."""

from __future__ import annotations

import csv
import io
import json
import math

from fairtui.compare import EXPORT_METRICS, ExportRow

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


def render(rows: list[ExportRow], fmt: str, attack: str, checkpoint: str) -> str:
    if fmt == "json":
        return json.dumps({"attack": attack, "checkpoint": checkpoint, "units": "percent; CV in percent^2",
                           "rows": [{"label": r.label, "runs": r.runs,
                                     **{k: {"mean": r.mean_std(k)[0], "std": r.mean_std(k)[1], "values": r.values[k]}
                                        for k in EXPORT_METRICS}} for r in rows]}, indent=1)
    header = ["Method"] + [HEADERS[k] for k in EXPORT_METRICS]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(["label", "n_runs"] + [f"{k}_{s}" for k in EXPORT_METRICS for s in ("mean", "std")])
        for r in rows:
            writer.writerow([r.label, len(r.runs)] + [f"{v:.6g}" for k in EXPORT_METRICS for v in r.mean_std(k)])
        return buf.getvalue()
    if fmt == "md":
        lines = [f"{attack} @ {checkpoint}, accuracies in %, CV in %^2", "",
                 "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join([r.label] + [_cell(r, k, " ± ") for k in EXPORT_METRICS]) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        esc = lambda s: s.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")  # noqa: E731
        lines = [r"\begin{tabular}{l" + "r" * len(EXPORT_METRICS) + "}", r"\toprule",
                 " & ".join(esc(h) for h in header) + r" \\", r"\midrule"]
        lines += [" & ".join([esc(r.label)] + [_cell(r, k, r" $\pm$ ") for k in EXPORT_METRICS]) + r" \\"
                  for r in rows]
        lines += [r"\bottomrule", r"\end{tabular}"]
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose csv, md, latex or json")
