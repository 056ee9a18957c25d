"""The paired block of the CIFAR-10 fairness tables: each fairness method against the base it builds on, paired by
seed, with Holm's adjustment over the table's methods (experiments/fairness_table.py renders it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairtui.runs.runfolder import RunView

if TYPE_CHECKING:
    from experiments.fairness_table import Row

HEADLINE_ATTACK = "pgd20"
# Each fairness method against the base it builds on, paired by seed (fairtui compare's statistics).
BASES = {"frl": "at", "cfa-at": "at", "faal": "at", "wat": "trades", "cfa-trades": "trades", "dafa": "trades",
         "tian": "trades", "bat": "trades", "csr": "trades", "trix": "trades", "absld": "trades"}


def paired_table(results: Path, rows: "list[Row]", checkpoints: tuple[str, ...] = ("last", "best")) -> list[str]:
    """Each fairness method against its base (BASES), paired by seed: `fairtui compare --by profile --baseline
    BASE` on the same files, one row per method and checkpoint. A fine-tune is paired with the runs it started
    from (in RESULTS or RESULTS-bases), and in a second row with the checkpoints it started from (`--against-start`:
    the base's best, where the first row sets the base at the same checkpoint as the fine-tune). The worst class's
    t-test p is also given after Holm's adjustment over the methods at that checkpoint (:func:`holm_in_family`)."""
    from fairtui.judge.groups import compare_groups
    from fairtui.judge.sources import results_runs

    bases_dir = results.with_name(results.name + "-bases")
    bases = {d.name: RunView.load(d) for d in results_runs(bases_dir)} if bases_dir.is_dir() else {}
    by_method = {r.method: r for r in rows}
    lines = []
    for ckpt in checkpoints:
        made = []  # (row, base, pairing, whether it is the row against the starts)
        for row in rows:
            base = by_method.get(BASES.get(row.method, ""))
            if base is None or not row.results(ckpt) or not base.results(ckpt):
                continue
            for against_start in (False, True):
                cmp = compare_groups({base.profile: base.views, row.profile: row.views}, base.profile,
                                     HEADLINE_ATTACK, ckpt, bases=bases, against_start=against_start,
                                     allow_protocol_difference=True)  # each difference named in its row
                (p,) = cmp.pairings
                if p.reason is not None:
                    lines.append(f"| {row.label} | {base.label} | {ckpt} | not paired: {p.reason} | | | | | | |")
                    break
                if against_start and (p.against != "start" or {st.checkpoint for st in p.starts} == {ckpt}):
                    break  # no fine-tune of the base's runs, or one whose starts are at this checkpoint: said above
                made.append((row, base, p, against_start))
        family = {row.method: p.results["worst_robust"].p for row, _, p, start in made if not start}
        for row, base, p, start in made:
            lines.append(paired_line(row, base, p, ckpt, holm_in_family(family, row.method,
                                                                        p.results["worst_robust"].p)))
    if not lines:
        return []
    return ["| method | base | checkpoint | seeds paired | worst class, difference [95% CI] | p (t / exact / Holm) | "
            "verdict | 80% power for (points) / seeds for 2 points | average, difference [95% CI] | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|", *lines]


def holm_in_family(family: dict[str, float], method: str, p: float) -> float:
    """``p`` after Holm's adjustment over the methods' comparisons at one checkpoint (``family``: method -> p),
    ``p`` standing in its method's place: a row against the starts is adjusted as if it were its method's test."""
    from fairtui.judge import stats

    ps = {**family, method: p}
    return stats.holm(list(ps.values()))[list(ps).index(method)]


def paired_line(row: "Row", base: "Row", p, ckpt: str, p_holm: float) -> str:
    """One row of the paired block: the worst class's and the average's difference with their verdicts."""
    from fairtui.judge.group_report import detectable_text, needed_text, p_text, pct, seeds_text

    w, a = p.results["worst_robust"], p.results["avg_robust"]
    seeds = seeds_text([m.seed for m, _ in p.pairs])
    where = ckpt
    if p.against == "start":
        seeds += " (each with the checkpoint it started from)"
        where += f" against the start ({' and '.join(dict.fromkeys(st.checkpoint for st in p.starts))})"
        if p.starts_left_out:
            seeds += "; left out: " + "; ".join(p.starts_left_out)
    elif p.by_init:
        seeds += " (each with the run it started from)"
    if p.protocol_differences:  # the method's own setting (WAT's step, FRL's schedule): said, not hidden
        seeds += "; trained with another budget: " + "; ".join(p.protocol_differences)
    return (f"| {row.label} | {base.label} | {where} | {seeds} | {pct(w.mean, True)} [{pct(w.ci95[0], True)}, "
            f"{pct(w.ci95[1], True)}] | {p_text(w.p)} / {p_text(w.p_permutation)} / {p_text(p_holm)} | {w.verdict} | "
            f"{detectable_text(w)} / {needed_text(w.seeds_for_effect)} | {pct(a.mean, True)} [{pct(a.ci95[0], True)}, {pct(a.ci95[1], True)}] "
            f"| {a.verdict} |")
