"""The words of a judgement: the interim block after each landed pair and the verdict (`fairtui judge`)."""

from __future__ import annotations

import math

from fairtui.campaign.outcome import counted_as_losses
from fairtui.judge.group_report import p_text, pairing_lines, pct, planning_text, seeds_text

METRIC_WORDS = {"worst_robust": "worst class", "avg_robust": "average"}
STOPPED = ("stopped: {n} run(s) stop after their batch; the same command continues (the landed seeds are kept, the "
           "others resume from their checkpoints)")  # after Ctrl-C


def _interval(lo: float, hi: float) -> str:
    if math.isinf(lo) or math.isinf(hi):
        return "unbounded"
    return f"[{pct(lo, True)}, {pct(hi, True)}]"


def level_text(alpha: float) -> str:
    """A confidence level as the outputs write it: 95%, and 98.3333% for a family of three (alpha 0.05 / 3)."""
    return f"{100 * (1 - alpha):.6g}%"


def _e_text(e: float) -> str:
    return "-" if math.isnan(e) else f"{e:.3g}"


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
        e = _e_text(s.e_value)
        return [f"{head}: {word} {pct(r.mean, True)} points; e-value {e} (decides at {1 / s.alpha:g}), anytime-valid "
                f"{level_text(s.alpha)} interval {_interval(*s.interval)}: {s.verdict}"]
    return [f"{head}: {word} {pct(r.mean, True)} points {_interval(*r.ci95)} (95% t), p {p_text(r.p)}; not a "
            "verdict until every seed has landed"]


def verdict_lines(look, spec, failed: dict[int, str], roles: dict[int, str] | None = None) -> list[str]:
    """The verdict: with --until-decided the safe t-test's decision, its e-value and anytime-valid interval first;
    then the paired comparison as `compare --by profile --baseline` gives it (both metrics, the planning numbers,
    every protocol or runtime difference), and the seeds that failed."""
    setting = look.comparison.groups[0].setting() if look.comparison else "-"
    out = [f"judge {spec.key}: {spec.method.label} against {spec.baseline.label}, {METRIC_WORDS[spec.metric]} "
           f"robust accuracy at {spec.checkpoint} ({setting})"]
    p = look.pairing
    if p is None:
        out.append("no pair landed: nothing to judge")
    elif look.sequential is not None:
        s = look.sequential
        e = _e_text(s.e_value)
        out += [f"verdict: {s.verdict} (safe t-test, anytime-valid: e-value {e} against {1 / s.alpha:g} at {s.n} "
                f"seeds; {level_text(s.alpha)} confidence sequence {_interval(*s.interval)} points)",
                "the fixed-n numbers below are for reference: after looking at every seed only the line above "
                "keeps its 5% error rate"]
    elif p.reason is None:
        r = p.results[spec.metric]
        out.append(f"verdict: {r.verdict} ({METRIC_WORDS[spec.metric]}, paired t-test at 5%, {r.n} seeds); "
                   f"{planning_text(r)}")
    counted = counted_as_losses(look, spec, roles or {}) if p is not None and p.reason is None else None
    if counted is not None:
        k, n = len(counted["failed_seeds"]), counted["n"]
        out.append(f"{n} seeds, {k} failed ({spec.method.label}'s run of seed{'s' if k > 1 else ''} "
                   f"{seeds_text(counted['failed_seeds'])}): left out of the verdict above; counted as losses (each "
                   f"the worst difference seen, {pct(counted['loss'], True)} points): mean {pct(counted['mean'], True)} "
                   f"points {_interval(*counted['interval'])}, {counted['verdict']}")
    if p is not None:
        out += pairing_lines(p)
    out += [f"failed: {line} (left out; remove the run and run the same command to train it again)"
            for line in (failed[s] for s in sorted(failed))]
    return out


def next_look_text(running, method_runs: set[str], queued: int = 0) -> str:
    """When the next look comes, from the running method runs' time left (the test evaluation comes on top):
    "next look in about 3 min (seed 2's pair)", or why it cannot be said yet; with nothing of it running and runs of
    it queued, what it waits for (the CPU's slots that other runs of the home hold)."""
    if not running and queued:
        return (f"waiting: {queued} run(s) of this judgement queued behind the home's other runs, which hold the "
                "CPU's slots (fairtui ls --status running)")
    from fairtui.runs.runfolder import RunView
    from fairtui.runs.runstate import format_seconds, run_eta

    best = None
    for run_dir in running:
        if run_dir.name not in method_runs:
            continue
        view = RunView.load(run_dir)
        left = run_eta(view.epochs, int((view.config.get("train") or {}).get("epochs") or 0))
        seed = (view.meta.get("judge") or {}).get("seed")
        if left is not None and (best is None or left < best[0]):
            best = (left, seed)
    if best is None:
        return "next look: after a running method run's first epoch" if running else "next look: when a run starts"
    return f"next look in about {format_seconds(best[0])} + its test (seed {best[1]}'s pair)"


def forest_lines(look, width: int = 36) -> list[str]:
    """The paired differences as a text forest plot (the app's judge screen): a row per landed seed, its difference
    as a dot, and the mean with its interval (the anytime-valid one with --until-decided, else the 95% t-interval),
    on one scale with 0 marked: "seed 3    +4.2  ........|....o....."."""
    diffs = look.differences()
    if not diffs:
        return ["no pair has landed yet"]
    mean = sum(diffs) / len(diffs)
    if look.sequential is not None:
        lo, hi = look.sequential.interval
    else:
        lo, hi = look.pairing.results[look.metric].ci95
    finite = [x for x in (*diffs, lo, hi, 0.0) if not (math.isnan(x) or math.isinf(x))]
    span = max(abs(x) for x in finite) or 0.01
    at = lambda x: round((min(max(x, -span), span) + span) / (2 * span) * (width - 1))  # noqa: E731

    def row(label: str, value: float, interval: tuple[float, float] | None = None) -> str:
        cells = ["."] * width
        cells[at(0.0)] = "|"
        if interval is not None:
            a, b = (at(x) if not math.isinf(x) and not math.isnan(x) else (0 if x < 0 else width - 1)
                    for x in interval)
            for i in range(a, b + 1):
                cells[i] = "-"
            cells[a], cells[b] = "[", "]"
        cells[at(value)] = "o"
        return f"{label:<9} {pct(value, True):>6}  {''.join(cells)}"

    out = [row(f"seed {s}", d) for s, d in zip(look.seeds, diffs)]
    out.append(row("mean", mean, (lo, hi)))
    word = "anytime-valid 95%" if look.sequential is not None else "95% t"
    out.append(f"{'':<9} {'':>6}  {pct(-span, True)} to {pct(span, True)} points; [ ]: the {word} interval")
    return out
