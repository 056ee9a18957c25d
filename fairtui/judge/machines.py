"""Which kind of CPU trained each run, and whether a group or a pairing mixes kinds (STATS.md: a pair is trained on
one kind of CPU, or the difference of kernels is named and its effect tested).

Two CPUs whose kernels differ (torch's capability level, the instruction sets that choose oneDNN's kernels, the
vendor) round differently, and from the first step on every number differs: the quick protocol's TRADES seed 0 ends
its first epoch at loss 2.1099 on an Intel Xeon with AVX512-FP16 and at 2.1236 on an AMD EPYC with AVX512-BF16,
both torch capability AVX512. A group that mixes kinds is named; a pairing whose pairs trained on several kinds is
split by kind, and the halves' mean differences are compared (Welch's t-test)."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from fairtui.runs.provenance import first_session, kernel_flags

if TYPE_CHECKING:  # the groups' types by name only: importing fairtui.judge.groups here would make a circle
    from fairtui.runs.runfolder import RunView


def kernel_kind(view: "RunView") -> str | None:
    """The kind of CPU whose kernels trained the run: "AVX512 on AMD EPYC (avx2, fma, avx512f, ...)", from its first
    training session's record; None for a run that trained on a GPU or recorded no CPU."""
    started = first_session(view)
    if not str(started.get("device", "cpu")).startswith("cpu"):
        return None
    record = started.get("provenance") or {}
    cpu = record.get("cpu") or {}
    if not cpu:
        return None
    capability = (record.get("determinism") or {}).get("cpu_capability", "?")
    return f"{capability} on {cpu.get('model', '?')} ({', '.join(kernel_flags(cpu)) or '-'})"


def same_kernels(a: dict, b: dict) -> bool:
    """Whether two provenance records' CPUs run the same kernels: vendor, the instruction sets that choose fp32 and
    bf16 kernels, and torch's capability."""
    def kind(record: dict) -> tuple:
        cpu = record.get("cpu") or {}
        return (cpu.get("vendor"), tuple(sorted(kernel_flags(cpu))),
                (record.get("determinism") or {}).get("cpu_capability"))
    return kind(a) == kind(b)


def _seeds(seeds: list) -> str:
    return ", ".join(str(s) for s in seeds)


def group_cpu_note(group: "Group") -> list[str]:
    """A line when the group's runs trained on more than one kind of CPU, naming each kind's seeds."""
    kinds: dict[str, list] = {}
    for m in group.members:
        kind = kernel_kind(m.view)
        if kind is not None:
            kinds.setdefault(kind, []).append(m.seed)
    if len(kinds) < 2:
        return []
    return [f"trained on {len(kinds)} kinds of CPU, whose kernels round differently: "
            + "; ".join(f"{kind} (seeds {_seeds(seeds)})" for kind, seeds in kinds.items())]


def pairing_cpu_lines(p: "Pairing", metric: str = "worst_robust") -> list[str]:
    """What a pairing's CPUs mean for it: nothing when every run trained on one kind; else which pairs trained on
    which kinds and, where two sets of pairs have at least two pairs each, their mean differences and Welch's p
    (a small p: the kernels' difference is in the pooled result)."""
    halves: dict[tuple, list] = {}
    for a, b in p.pairs:
        ka, kb = kernel_kind(a.view), kernel_kind(b.view)
        if ka is None or kb is None:
            continue
        halves.setdefault((ka, kb), []).append((a.seed, a.summary[metric] - b.summary[metric]))
    kinds = {k for pair in halves for k in pair}
    if len(kinds) < 2:
        return []
    lines = []
    for (ka, kb), rows in halves.items():
        where = f"both on {ka}" if ka == kb else f"{p.group} on {ka}, {p.baseline} on {kb}"
        lines.append(f"seeds {_seeds([s for s, _ in rows])}: {where}")
    if len(halves) == 1:
        lines.append("every pair trained its two runs on different kinds of CPU: the differences hold the kernels' "
                     "effect with the method's, and these pairs cannot tell them apart (train both sides on one CPU)")
        return lines
    big = sorted(halves.values(), key=len, reverse=True)[:2]
    if len(big) == 2 and min(len(h) for h in big) >= 2:
        from scipy import stats

        x, y = ([d for _, d in h] for h in big)
        if statistics.stdev(x) > 0 or statistics.stdev(y) > 0:
            p_welch = float(stats.ttest_ind(x, y, equal_var=False).pvalue)
            word = "differ" if p_welch < 0.05 else "do not differ at 5%"
            lines.append(f"the halves' mean differences {100 * statistics.fmean(x):+.1f} and "
                         f"{100 * statistics.fmean(y):+.1f} points {word} (Welch p "
                         f"{'nan' if math.isnan(p_welch) else f'{p_welch:.3g}'}): the pooled difference holds the "
                         "kernels' effect with the method's")
    else:
        lines.append("too few pairs of each kind to test whether the kinds differ")
    return lines
