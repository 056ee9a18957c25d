"""The words of a judgement: the interim block after each landed pair and the verdict (`fairtui judge`)."""

from __future__ import annotations

import math

from fairtui.judge.group_report import p_text, pairing_lines, pct, planning_text, seeds_text

METRIC_WORDS = {"worst_robust": "worst class", "avg_robust": "average"}


def _interval(lo: float, hi: float) -> str:
    if math.isinf(lo) or math.isinf(hi):
        return "unbounded"
    return f"[{pct(lo, True)}, {pct(hi, True)}]"


def interim_lines(look, spec) -> list[str]:
    """After a pair lands: the pairs so far, the metric's mean difference with its interval, and (until decided)
    where the safe t-test stands. Marked *interim*: a fixed-n p looked at after every seed is not a test."""
    p = look.pairing
    head = f"interim, {len(look.seeds)} pair{'s' if len(look.seeds) != 1 else ''} (seeds {seeds_text(look.seeds)})"
    if p is None or p.reason is not None:
        return [f"{head}: not paired, {p.reason if p else 'no pair yet'}"]
    r = p.results[spec.metric]
    word = METRIC_WORDS[spec.metric]
    if look.sequential is not None:
        s = look.sequential
        e = "-" if math.isnan(s.e_value) else f"{s.e_value:.3g}"
        return [f"{head}: {word} {pct(r.mean, True)} points; e-value {e} (decides at 20), anytime-valid 95% "
                f"interval {_interval(*s.interval)}: {s.verdict}"]
    return [f"{head}: {word} {pct(r.mean, True)} points {_interval(*r.ci95)} (95% t), p {p_text(r.p)}; not a "
            "verdict until every seed has landed"]


def verdict_lines(look, spec, failed: dict[int, str]) -> list[str]:
    """The verdict: with --until-decided the safe t-test's decision, its e-value and anytime-valid interval first;
    then the paired comparison as `compare --by profile --baseline` gives it (both metrics, the planning numbers,
    every protocol or runtime difference), and the seeds that failed."""
    out = [f"judge {spec.key}: {spec.method.label} against {spec.baseline.label}, {METRIC_WORDS[spec.metric]} "
           f"robust accuracy at {spec.checkpoint} ({look.comparison.to_json()['groups'][0]['setting'] if look.comparison else '-'})"]
    p = look.pairing
    if p is None:
        out.append("no pair landed: nothing to judge")
    elif look.sequential is not None:
        s = look.sequential
        e = "-" if math.isnan(s.e_value) else f"{s.e_value:.3g}"
        out += [f"verdict: {s.verdict} (safe t-test, anytime-valid: e-value {e} against 20 at {s.n} seeds; "
                f"95% confidence sequence {_interval(*s.interval)} points)",
                "the fixed-n numbers below are for reference: after looking at every seed only the line above "
                "keeps its 5% error rate"]
    elif p.reason is None:
        r = p.results[spec.metric]
        out.append(f"verdict: {r.verdict} ({METRIC_WORDS[spec.metric]}, paired t-test at 5%, {r.n} seeds); "
                   f"{planning_text(r)}")
    if p is not None:
        out += pairing_lines(p) + cpu_lines(p)
    out += [f"failed: {line} (left out; remove the run and run the same command to train it again)"
            for line in (failed[s] for s in sorted(failed))]
    return out


def cpu_lines(p) -> list[str]:
    """A line where the paired runs' CPUs differ or are not all recorded: CPU kinds choose other kernels, so their
    numbers differ by more than the method (never mixed without saying so)."""
    from fairtui.runs.provenance import cpu_kind

    mine = list(dict.fromkeys(cpu_kind(a.view) for a, _ in p.pairs))
    theirs = list(dict.fromkeys(cpu_kind(b.view) for _, b in p.pairs))
    if len(set(mine + theirs)) <= 1 and "cpu not recorded" not in mine + theirs:
        return []
    return [f"  CPUs: {p.group} on {'; '.join(mine)}, {p.baseline} on {'; '.join(theirs)}: the paired differences "
            "may include the kernels' effect (docs/results-and-guarantees.md)"]
