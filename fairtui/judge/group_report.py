"""Renderings of a group comparison (fairtui.judge.groups): the terminal's (80 columns), Markdown, LaTeX and CSV. Numbers
in percent (points for differences), each table titled with the attack, checkpoint and settings behind it."""

from __future__ import annotations

import csv
import io
import math

from fairtui.judge.groups import GroupComparison, Pairing
from fairtui.runs.usertext import csv_cell, fold_label, inert, latex, md_cell

METRIC_WORDS = {"worst_robust": "worst", "avg_robust": "average"}
LEFT_OUT_SHOWN = 5  # a group's left-out runs named in the text, the rest counted (--json lists them all)


def dz_text(dz: tuple[float, float, float]) -> str:
    """The standardised effect d_z with its 95% interval, or '-' where it has none (one pair, no spread)."""
    value, lo, hi = dz
    if math.isnan(value):
        return "-"
    return f"{value:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def family_text(p: Pairing) -> str:
    """The Holm family a pairing is adjusted in, named: which groups, against what, on which metric."""
    others = len(p.family_groups)
    return (f"{p.family}: {others} group{'s' if others != 1 else ''} against {p.baseline} "
            f"({', '.join(p.family_groups)}); worst class primary, average secondary, each adjusted on its own")


def pct(x: float | None, signed: bool = False, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x * 100:+.{digits}f}" if signed else f"{x * 100:.{digits}f}"


def mean_ci(interval: tuple[float, float, float], sep: str = " ± ") -> str:
    """"38.9 ± 1.2" (the half-width of the 95% interval); one seed: the value alone."""
    mean, lo, hi = interval
    return pct(mean) if math.isnan(lo) else f"{pct(mean)}{sep}{(hi - lo) * 50:.1f}"


def p_text(p: float | None) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    return f"{p:.3f}" if p >= 0.001 else "<0.001"


def seeds_text(seeds: list) -> str:
    return ", ".join("?" if s is None else str(s) for s in seeds)


def compact_seeds(seeds: list) -> str:
    """"0-4" for a run of consecutive seeds, else "0,2,5"."""
    known = [s for s in seeds if s is not None]
    if len(known) == len(seeds) and len(known) > 2 and known == list(range(known[0], known[0] + len(known))):
        return f"{known[0]}-{known[-1]}"
    return ",".join("?" if s is None else str(s) for s in seeds)


def detectable_text(r) -> str:
    """The smallest difference a pairing's seeds detect with 80% power, in points: "3.1", or "-" below two pairs."""
    return "-" if r.detectable is None else f"{100 * r.detectable:.1f}"


def planning_text(r) -> str:
    """The planning line of a paired result: "80% power for 1.9 points at these seeds; 8 seeds for 2.0 points"."""
    return (f"80% power for {detectable_text(r)} points at these seeds; {needed_text(r.seeds_for_effect)} seeds for "
            f"{100 * r.effect:.1f} points")


def needed_text(n: int | None) -> str:
    from fairtui.judge.stats import SEEDS_NEEDED_MAX

    if n is None:
        return "-"
    return f">{SEEDS_NEEDED_MAX}" if n > SEEDS_NEEDED_MAX else str(n)


def title(cmp: GroupComparison) -> str:
    setting = "; ".join(dict.fromkeys(g.setting() for g in cmp.groups))
    return f"{setting} @ {cmp.checkpoint}"


# -- the terminal ----------------------------------------------------------------------------------------------

def terminal(cmp: GroupComparison) -> list:
    """Rich renderables, none wider than 80 columns: the groups, their per-class means, and each pairing as a
    short block of lines."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out: list = []
    groups = Table(title=inert(f"Groups: {title(cmp)}", markup=True), box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False,
                   caption="mean ± 95% t half-width over the seeds, %; CV: class-wise variance (Tian et al.), fractions^2", caption_justify="left")
    for name, justify in (("group", "left"), ("seeds", "left"), ("clean", "right"), ("robust", "right"),
                          ("worst", "right"), ("CV", "right")):
        # a long label folds onto a second line after a hyphen, never cut: labels of one profile differ at their ends
        groups.add_column(name, justify=justify, no_wrap=name != "group", overflow="fold",
                          max_width=24 if name == "group" else None)
    for g in cmp.groups:
        groups.add_row(fold_label(inert(g.label, markup=True), 24), compact_seeds(g.seeds), *(mean_ci(g.interval(k), "±") for k in
                                                          ("avg_clean", "avg_robust", "worst_robust")),
                       f"{g.interval('cv')[0]:.4f}")
    out.append(groups)
    per_class = Table(title="Per-class robust accuracy, mean of the seeds (%)", box=box.SIMPLE_HEAD,
                      title_justify="left", pad_edge=False, padding=(0, 0))
    per_class.add_column("group", max_width=24, overflow="fold")
    for name in cmp.class_names:
        per_class.add_column(inert(name[:4], markup=True), justify="right", no_wrap=True, min_width=4)
    for g in cmp.groups:
        per_class.add_row(fold_label(inert(g.label, markup=True), 24), *(pct(v, digits=0) for v in g.per_class_means()))
    out.append(per_class)
    for g in cmp.groups:
        for line in left_out_lines(g.label, g.left_out):
            out.append(Text(inert(line), style="yellow"))
        for note in g.notes:
            out.append(Text(inert(f"{g.label}: {note}"), style="yellow"))
    for line in shown_lines(cmp.left_out):  # before grouping (unreadable, cut), and of the groups left empty
        out.append(Text(inert(line), style="yellow"))
    family = sum(p.reason is None for p in cmp.pairings)
    for p in cmp.pairings:
        out.append(Text("\n".join(inert(line) for line in pairing_lines(p, family))))
    return out


def left_out_lines(label: str, left_out: list[str]) -> list[str]:
    """A group's left-out runs, each named up to LEFT_OUT_SHOWN; past that, the first few and a count (a home
    where one seed was run forty times would bury the comparison under forty lines)."""
    return shown_lines([f"left out of {label}: {line}" for line in left_out], f"left out of {label}: ")


def shown_lines(lines: list[str], head: str = "left out: ") -> list[str]:
    """``lines`` up to LEFT_OUT_SHOWN, or the first few and a count."""
    if len(lines) <= LEFT_OUT_SHOWN:
        return lines
    rest = len(lines) - (LEFT_OUT_SHOWN - 1)
    return [*lines[:LEFT_OUT_SHOWN - 1], f"{head}{rest} more runs (--json lists them all)"]


def pairing_lines(p: Pairing, family: int = 1) -> list[str]:
    """A pairing's lines; with ``family`` groups paired with the same baseline, each verdict line adds the t-test's
    p after Holm's adjustment for the others."""
    head = f"{p.group} against {p.baseline}"
    if p.reason is not None:
        return [f"{head}: not paired, {p.reason}"]
    if not p.pairs:  # every pair left out (a fine-tune whose starts are gone): say why, not "seeds ;" and dashes
        why = p.starts_left_out or ([f"the runs {_seeds_word(p.bases_missing)} started from are not at hand"]
                                    if p.bases_missing else ["no seed is in both groups"])
        return [f"{head}: nothing paired", *(f"  left out: {line}" for line in why)]
    how = "each run with the run it started from" if p.by_init else "by seed"
    if p.against == "start":
        how = "each run with the checkpoint it started from"
    seeds = seeds_text([a.seed for a, _ in p.pairs])
    lines = [head, f"  paired {how}: seeds {seeds}"
             + (f"; dropped: seeds {seeds_text(p.dropped_seeds)}" if p.dropped_seeds else "")]
    if p.against == "start":
        lines.append(f"  {p.baseline} at {starts_text(p)}")
    lines += [f"  left out: {line}" for line in p.starts_left_out]
    if p.bases_missing:
        where = ("are in neither this home nor the --bases folders" if p.bases_searched
                 else "are not at hand: give --bases DIR")
        lines.append(f"  the runs {_seeds_word(p.bases_missing)} started from {where}")
    lines += [f"  protocol: {line} (allowed)" for line in p.protocol_differences]
    if p.runtime_differs():
        mine, theirs = ("; ".join(r) for r in p.runtimes())
        lines += [f"  trained in another runtime: {mine} against {theirs}",
                  "  (the differences include its effect: docs/results.md, Precision on the CPU)"]
    for metric, word in METRIC_WORDS.items():
        r = p.results[metric]
        ci = f"[{pct(r.ci95[0], True)}, {pct(r.ci95[1], True)}]"
        lines.append(f"  {word:<7} {pct(r.mean, True)} points {ci}  p {p_text(r.p)} (t), "
                     f"{p_text(r.p_permutation)} (exact)" + ("" if metric == "worst_robust" else "  (secondary)"))
        holm = f"Holm p {p_text(r.p_holm)}; " if len(p.family_groups) > 1 else ""
        lines.append(f"          {r.verdict}")
        lines.append(f"          {holm}d_z {dz_text(r.dz)}")
        lines.append(f"          {planning_text(r)}")
    lines += [f"  CPUs: {line}" for line in p.cpus]
    size = len(p.family_groups)
    lines.append(f"  Holm family: {p.family} ({size} group{'s' if size != 1 else ''} against {p.baseline})")
    rho = [f"{x:+.2f}" if x is not None else "-" for x in p.rho]
    mean = [x for x in p.rho if x is not None]
    if rho:
        lines.append(f"  rho     {', '.join(rho)}" + (f" (mean {sum(mean) / len(mean):+.2f})" if mean else ""))
    return lines


# -- files -----------------------------------------------------------------------------------------------------

def render(cmp: GroupComparison, fmt: str) -> str:
    """Markdown, LaTeX or CSV of the groups and the paired differences."""
    if fmt == "csv":
        return _csv(cmp)
    if fmt == "latex":
        return _latex(cmp)
    return _markdown(cmp)


def _group_cells(g) -> list[str]:
    return [g.label, str(len(g.members)), seeds_text(g.seeds), mean_ci(g.interval("avg_clean")),
            mean_ci(g.interval("avg_robust")), mean_ci(g.interval("worst_robust")), f"{g.interval('cv')[0]:.4f}"]


def _pair_cells(p: Pairing, metric: str) -> list[str]:
    r = p.results[metric]
    word = METRIC_WORDS[metric] + ("" if metric == "worst_robust" else " (secondary)")
    return [p.group, p.baseline, word, str(r.n), pct(r.mean, True),
            f"[{pct(r.ci95[0], True)}, {pct(r.ci95[1], True)}]", dz_text(r.dz), p_text(r.p), p_text(r.p_permutation),
            p_text(r.p_holm), r.verdict, detectable_text(r), needed_text(r.seeds_for_effect),
            seeds_text(p.dropped_seeds) or "-"]


GROUP_HEAD = ["group", "n", "seeds", "clean", "robust avg", "robust worst", "CV"]
PAIR_HEAD = ["group", "baseline", "metric", "n", "difference (points)", "95% CI", "d_z [95% CI]", "p (t)", "p (exact)",
             "p (t, Holm)",
             "verdict", "80% power for (points)", "seeds for the named effect", "dropped seeds"]


def _markdown(cmp: GroupComparison) -> str:
    lines = [f"Groups ({title(cmp)}; mean ± 95% t half-width over seeds, %):", "",
             "| " + " | ".join(GROUP_HEAD) + " |", "|" + "---|" * len(GROUP_HEAD)]
    lines += ["| " + " | ".join(md_cell(c) for c in _group_cells(g)) + " |" for g in cmp.groups]
    head = ["group", *cmp.class_names]
    lines += ["", "Per-class robust accuracy (mean ± 95% t half-width over seeds, %):", "",
              "| " + " | ".join(md_cell(c) for c in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([md_cell(g.label), *(mean_ci(c) for c in g.per_class_intervals())]) + " |"
              for g in cmp.groups]
    paired = [p for p in cmp.pairings if p.reason is None]
    if paired:
        lines += ["", f"Paired against {cmp.baseline} (differences in points of %):", "",
                  "| " + " | ".join(PAIR_HEAD) + " |", "|" + "---|" * len(PAIR_HEAD)]
        lines += ["| " + " | ".join(md_cell(c) for c in _pair_cells(p, m)) + " |" for p in paired for m in METRIC_WORDS]
    for p in cmp.pairings:
        if p.reason is not None:
            lines.append(f"\n{md_cell(p.group)} is not paired with {md_cell(p.baseline)}: {md_cell(p.reason)}.")
        elif p.bases_missing:
            lines.append(f"\n{md_cell(p.group)} is paired by seed: {bases_missing_text(p)}.")
        elif p.against == "start":
            lines.append(f"\n{md_cell(against_start_text(p, cmp.checkpoint))}.")
        if p.reason is None and p.runtime_differs():
            lines.append(f"\n{md_cell(p.group)} against {md_cell(p.baseline)}: {md_cell(runtime_text(p))}.")
        if p.reason is None and p.protocol_differences:
            lines.append(f"\n{md_cell(p.group)} against {md_cell(p.baseline)}: {md_cell(protocol_text(p))}.")
        if p.reason is None and p.cpus:
            lines.append(f"\n{md_cell(p.group)} against {md_cell(p.baseline)}, CPUs: "
                         + "; ".join(md_cell(line) for line in p.cpus) + ".")
    shown = {p.family: p for p in paired}  # one line a family
    lines += [f"\nHolm family: {md_cell(family_text(p))}." for p in shown.values()]
    notes = [f"{g.label}: {note}" for g in cmp.groups for note in g.notes]
    lines += ["", *(md_cell(line) + "  " for line in notes)] if notes else []
    left = cmp.left_out_lines()
    lines += ["", *(md_cell(line) + "  " for line in left)] if left else []
    return "\n".join(lines) + "\n"


def protocol_text(p: Pairing) -> str:
    """The line of a pairing allowed across training budgets (``--allow-protocol-difference``)."""
    return ("paired across another training budget (--allow-protocol-difference): " + "; ".join(p.protocol_differences)
            + "; the differences include its effect")


def runtime_text(p: Pairing) -> str:
    """The line of a pairing whose two sides trained in other runtimes (:meth:`Pairing.runtime_differs`)."""
    mine, theirs = ("; ".join(r) for r in p.runtimes())
    return (f"trained in another runtime: {mine} against {theirs}; the differences include its effect "
            "(docs/results.md: Precision on the CPU)")


def starts_text(p: Pairing) -> str:
    """Where the baseline side of a pairing against the starts stands: "best, epochs 7, 9 (recorded by the engine
    as loaded)", or "best (inferred from method.init_from for seeds 0, 1; no epoch recorded)"."""
    if not p.starts:
        return "no start with a result"
    labels = " and ".join(dict.fromkeys(st.checkpoint or "?" for st in p.starts))
    inferred = [a.seed for st, (a, _) in zip(p.starts, p.pairs) if not st.recorded]
    if not inferred:
        epochs = ", ".join("?" if st.epoch is None else str(st.epoch) for st in p.starts)
        return f"{labels}, epochs {epochs} (recorded by the engine as loaded)"
    return f"{labels} (inferred from method.init_from for {_seeds_word(inferred)}; no epoch recorded)"


def against_start_text(p: Pairing, checkpoint: str) -> str:
    return (f"{p.group} is paired with the checkpoints its runs started from ({p.baseline} at {starts_text(p)}), "
            f"not with {p.baseline} at {checkpoint}" + "".join(f"; left out: {line}" for line in p.starts_left_out))


def bases_missing_text(p: Pairing) -> str:
    return (f"the runs {_seeds_word(p.bases_missing)} started from are not at hand, so it is not paired with the "
            "runs it started from (--bases DIR adds them)")


def _seeds_word(seeds: list) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {seeds_text(seeds)}"


def _latex(cmp: GroupComparison) -> str:
    def row(cells):
        return " & ".join(latex(c) for c in cells) + r" \\"

    lines = [r"% fairtui compare: " + inert(title(cmp)), r"\begin{tabular}{lrlrrrr}", r"\toprule",
             row(GROUP_HEAD), r"\midrule", *(row(_group_cells(g)) for g in cmp.groups), r"\bottomrule",
             r"\end{tabular}"]
    paired = [p for p in cmp.pairings if p.reason is None]
    if paired:
        lines += ["", r"\begin{tabular}{lllrrllrrrlrrl}", r"\toprule", row(PAIR_HEAD), r"\midrule",
                  *(row(_pair_cells(p, m)) for p in paired for m in METRIC_WORDS), r"\bottomrule", r"\end{tabular}"]
        lines += [f"% {inert(p.group)} is paired by seed: {inert(bases_missing_text(p))}" for p in paired
                  if p.bases_missing]
        lines += [f"% {inert(against_start_text(p, cmp.checkpoint))}" for p in paired if p.against == "start"]
        lines += [f"% {inert(p.group)} against {inert(p.baseline)}: {inert(runtime_text(p))}" for p in paired
                  if p.runtime_differs()]
        lines += [f"% {inert(p.group)} against {inert(p.baseline)}: {inert(protocol_text(p))}" for p in paired
                  if p.protocol_differences]
        lines += [f"% {inert(p.group)} against {inert(p.baseline)}, CPUs: {inert(line)}" for p in paired
                  for line in p.cpus]
        lines += [f"% Holm family: {latex(family_text(p))}" for p in {p.family: p for p in paired}.values()]
    lines += [f"% {inert(g.label)}: {inert(note)}" for g in cmp.groups for note in g.notes]
    lines += [f"% {inert(line)}" for line in cmp.left_out_lines()]
    return "\n".join(lines) + "\n"


def _csv(cmp: GroupComparison) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["table", "group", "baseline", "metric", "n", "seeds", "mean", "ci95_lo", "ci95_hi", "p_t",
                "p_exact", "p_holm", "verdict", "detectable", "seeds_for_effect", "effect", "dropped_seeds", "setting", "checkpoint", "units",
                "runtime", "protocol_differences", "dz", "dz_ci95_lo", "dz_ci95_hi", "holm_family", "role"])
    setting = title(cmp)
    for g in cmp.groups:
        for key in ("avg_clean", "avg_robust", "worst_robust", "cv"):
            mean, lo, hi = g.interval(key)
            w.writerow(["group", csv_cell(g.label), "", key, len(g.members), seeds_text(g.seeds), f"{mean:.6g}",
                        "" if math.isnan(lo) else f"{lo:.6g}", "" if math.isnan(hi) else f"{hi:.6g}", "", "", "", "",
                        "", "", "", "", csv_cell(setting), cmp.checkpoint, "fractions",
                        csv_cell("; ".join(g.runtimes())), "", "", "", "", "", ""])
    for p in cmp.pairings:
        if p.reason is not None:
            continue
        for metric in METRIC_WORDS:
            r = p.results[metric]
            w.writerow(["paired", csv_cell(p.group), csv_cell(p.baseline), metric, r.n, seeds_text([a.seed for a, _ in p.pairs]),
                        f"{r.mean:.6g}", f"{r.ci95[0]:.6g}", f"{r.ci95[1]:.6g}", f"{r.p:.6g}",
                        "" if math.isnan(r.p_permutation) else f"{r.p_permutation:.6g}",
                        "" if math.isnan(r.p_holm) else f"{r.p_holm:.6g}", r.verdict,
                        "" if r.detectable is None else f"{r.detectable:.6g}",
                        r.seeds_for_effect if r.seeds_for_effect is not None else "", f"{r.effect:.6g}",
                        seeds_text(p.dropped_seeds), csv_cell(setting),
                        cmp.checkpoint if p.against != "start" else f"{cmp.checkpoint} against the starts "
                        f"({' and '.join(dict.fromkeys(st.checkpoint or '?' for st in p.starts))})", "fractions",
                        csv_cell(" against ".join("; ".join(side) for side in p.runtimes())),
                        csv_cell("; ".join(p.protocol_differences)),
                        *("" if math.isnan(x) else f"{x:.6g}" for x in r.dz), csv_cell(p.family),
                        "primary" if metric == "worst_robust" else "secondary"])
    for g in cmp.groups:  # a run left out of its group, and why (in the verdict column)
        for line in g.left_out:
            w.writerow(["left_out", csv_cell(g.label), "", "", "", "", "", "", "", "", "", "", csv_cell(line), "", "", "",
                        "", csv_cell(setting), cmp.checkpoint, "", "", "", *[""] * 5])
    for g in cmp.groups:  # what a group's runs did not do (a FAWA that never accepted), in the verdict column
        for line in g.notes:
            w.writerow(["note", csv_cell(g.label), "", "", "", "", "", "", "", "", "", "", csv_cell(line), "", "", "",
                        "", csv_cell(setting), cmp.checkpoint, "", "", "", *[""] * 5])
    for line in cmp.left_out:  # before grouping, or of a group left empty (its label in the line)
        w.writerow(["left_out", "", "", "", "", "", "", "", "", "", "", "", csv_cell(line), "", "", "", "",
                    csv_cell(setting), cmp.checkpoint, "", "", "", *[""] * 5])
    return buf.getvalue()
