"""Groups of runs (a method's seeds) judged against a baseline group, paired by seed: the data layer of
`fairtui compare --by/--group`, `export` and `plot forest`, and of experiments/fairness_table.py. Plain Python:
no torch, no Textual.

Runs come from the home and from folders of committed run files (``--results DIR``: the layout of
``experiments/results/<profile>/<run-id>/``), which are only read. A group's number for a seed is that run's
headline result (the profile's own attack settings on the whole test split) at the chosen checkpoint."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from engine.contract import metrics
from fairtui.judge import stats
from fairtui.judge.compare import CompareError, pick_result, setting_label, summarise
from fairtui.judge.families import adjust_in_families
from fairtui.judge.machines import group_cpu_note, pairing_cpu_lines
from fairtui.judge.protocol import differences, protocol as protocol_of
from fairtui.judge.sources import non_finite
from fairtui.judge.starts import Start, init_run_id, start_of
from fairtui.runs.configurations import first_of_each_seed, profile_name, runtime_ran, seed_key as seed_of
from fairtui.runs.mechanisms import never_acted_note
from fairtui.runs.runfolder import RunView

PAIRED_METRICS = ("worst_robust", "avg_robust")
# The primary metric decides; the average is reported beside it, as secondary (STATS.md: a declared family).
ROLES = {"worst_robust": "primary", "avg_robust": "secondary"}

GROUP_METRICS = ("avg_clean", "avg_robust", "worst_robust", "cv")


# -- groups ----------------------------------------------------------------------------------------------------

@dataclass
class Member:
    view: RunView
    seed: int | None
    result: dict
    summary: dict


@dataclass
class Group:
    label: str
    members: list[Member] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # runs without the result, or a second run of a seed
    notes: list[str] = field(default_factory=list)  # what its runs did not do (a FAWA that never accepted)

    @property
    def seeds(self) -> list[int | None]:
        return [m.seed for m in self.members]

    def values(self, key: str) -> list[float]:
        return [m.summary[key] for m in self.members]

    def interval(self, key: str) -> tuple[float, float, float]:
        return stats.t_interval(self.values(key))

    def per_class_means(self) -> list[float]:
        rows = [m.result["robust_acc_per_class"] for m in self.members]
        return [statistics.fmean(r[c] for r in rows if r[c] is not None) for c in range(len(rows[0]))]

    def per_class_intervals(self) -> list[tuple[float, float, float]]:
        """Each class's robust accuracy over the seeds: (mean, lo, hi), the 95% t-interval (nan with one seed)."""
        rows = [m.result["robust_acc_per_class"] for m in self.members]
        return [stats.t_interval([r[c] for r in rows if r[c] is not None]) for c in range(len(rows[0]))]

    def setting(self) -> str:
        return "; ".join(dict.fromkeys(setting_label(m.result) for m in self.members))

    def runtimes(self) -> list[str]:
        """The runtimes its runs trained with ("fp32", "autocast bfloat16, channels-last"), each once."""
        return runtimes_of(self.members)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"label": self.label, "n": len(self.members), "seeds": self.seeds,
                               "runs": [m.view.run_id for m in self.members], "setting": self.setting(),
                               "left_out": self.left_out, "protocol": protocol(self.members[0]),
                               "runtime": self.runtimes(), "notes": self.notes}
        for key in GROUP_METRICS:
            mean, lo, hi = self.interval(key)
            out[key] = {"mean": mean, "ci95": [_num(lo), _num(hi)], "values": self.values(key)}
        out["robust_acc_per_class_mean"] = self.per_class_means()
        out["robust_acc_per_class_ci95"] = [[_num(lo), _num(hi)] for _, lo, hi in self.per_class_intervals()]
        return out


def build_group(label: str, views: list[RunView], attack: str | None, checkpoint: str,
                n_per_class: int = 0) -> Group:
    """A group of ``views``: each run's result at ``checkpoint`` (its headline one unless ``n_per_class``); a run
    without one, or a second run of a seed already in the group, is left out and named."""
    group = Group(label)
    for view in sorted(views, key=first_of_each_seed):  # the one rule: the first run of a seed is the group's
        seed = seed_of(view)
        try:
            result = pick_result(view, attack, checkpoint, n_per_class=n_per_class)
        except CompareError:
            group.left_out.append(f"{view.name} [{view.run_id}]: no {attack or 'robust'} result at {checkpoint}")
            continue
        bad = non_finite(result)
        if bad:  # data, not a crash: the run is left out and named with the class
            group.left_out.append(f"{view.name} [{view.run_id}]: a non-finite result at {checkpoint} ({bad})")
            continue
        if seed is not None and seed in group.seeds:
            group.left_out.append(f"{view.name} [{view.run_id}]: a second run of seed {seed}")
            continue
        group.members.append(Member(view, seed, result, summarise(result)))
    group.notes = never_acted_note([m.view for m in group.members], seed_of) + group_cpu_note(group)
    return group



def runtimes_of(members) -> list[str]:
    """The runtimes ``members`` trained with (fairtui.runs.configurations.runtime_ran), each once, in their order."""
    return list(dict.fromkeys(runtime_ran(m.view) for m in members))


def protocol(member: Member) -> dict[str, Any]:
    """What makes two groups' numbers comparable (fairtui.judge.protocol)."""
    return protocol_of(member.view, member.result)


def protocol_differences(a: Member, b: Member) -> tuple[str | None, list[str]]:
    """The measurement difference that forbids pairing, and the training-budget differences (fairtui.judge.protocol)."""
    return differences(a.view, a.result, b.view, b.result)


# -- pairing ---------------------------------------------------------------------------------------------------

@dataclass
class Pairing:
    """One group against the baseline: the pairs, what was dropped, and the paired statistics."""

    group: str
    baseline: str
    pairs: list[tuple[Member, Member]] = field(default_factory=list)
    dropped_seeds: list[int | None] = field(default_factory=list)
    by_init: bool = False  # the fine-tune's runs are paired with the runs they started from
    # "checkpoint": each side at the comparison's checkpoint; "start": each fine-tune run against the very
    # checkpoint it started from (``against_start``), its label and epoch per pair in ``starts``
    against: str = "checkpoint"
    starts: list[Start] = field(default_factory=list)
    starts_left_out: list[str] = field(default_factory=list)  # fine-tune runs whose start has no result to pair
    # seeds of a fine-tune of the baseline whose start is not at hand (others' are): paired by seed instead
    bases_missing: list[int | None] = field(default_factory=list)
    bases_searched: bool = False  # --bases was given (and held none of the missing starts)
    reason: str | None = None  # not paired: why
    # training-budget differences between the two sides, paired because the user allowed them: named in every output
    protocol_differences: list[str] = field(default_factory=list)
    results: dict[str, stats.PairedResult] = field(default_factory=dict)
    rho: list[float | None] = field(default_factory=list)
    # the Holm family this pairing's p is adjusted in: its name and the groups in it (fairtui.judge.groups.families)
    family: str = ""
    family_groups: list[str] = field(default_factory=list)
    cpus: list[str] = field(default_factory=list)  # which kinds of CPU the pairs trained on, where they differ

    @property
    def n(self) -> int:
        return len(self.pairs)

    def runtimes(self) -> tuple[list[str], list[str]]:
        """The runtimes the paired runs trained with: the group's side, the baseline's side."""
        return runtimes_of(a for a, _ in self.pairs), runtimes_of(b for _, b in self.pairs)

    def runtime_differs(self) -> bool:
        """Whether a pair's two runs trained in other precisions or runtimes (bf16 against fp32, compiled against
        eager): a paired difference then holds the runtime's effect with the method's (a comparison the user may
        mean, as the CPU's precision check does, so it is said, not refused)."""
        return any(runtime_ran(a.view) != runtime_ran(b.view) for a, b in self.pairs)

    def entries(self) -> list[dict]:
        """The JSON entries of `compare --json`'s ``paired`` list, one per metric."""
        out = []
        for metric in PAIRED_METRICS:
            r = self.results[metric]
            out.append({"group": self.group, "baseline": self.baseline, "metric": metric, "n": r.n,
                        "mean": _num(r.mean), "ci95": [_num(r.ci95[0]), _num(r.ci95[1])], "p": _num(r.p),
                        "p_holm": _num(r.p_holm), "holm_family": {"name": self.family, "groups": self.family_groups,
                                                                   "metric": metric, "role": ROLES[metric]},
                        "dz": {"value": _num(r.dz[0]), "ci95": [_num(r.dz[1]), _num(r.dz[2])]},
                        "p_permutation": _num(r.p_permutation), "verdict": r.verdict,
                        "detectable": _num(r.detectable), "effect": r.effect, "seeds_for_effect": r.seeds_for_effect,
                        "dropped_seeds": self.dropped_seeds, "seeds": [a.seed for a, _ in self.pairs],
                        "differences": [a.summary[metric] - b.summary[metric] for a, b in self.pairs],
                        "pairing": "init_from" if self.by_init else "seed", "bases_missing": self.bases_missing,
                        "against": self.against, "starts": [st.to_json() for st in self.starts],
                        "starts_left_out": self.starts_left_out, "protocol_differences": self.protocol_differences,
                        "runtime": dict(zip(("group", "baseline"), self.runtimes())),
                        "cpus": self.cpus, "rho_per_seed": self.rho, "rho_mean": _num(_mean_or_nan(self.rho))})
        return out


def start_member(base: RunView, start: Start, attack: str | None, n_per_class: int) -> tuple[Member | None, str]:
    """The base run's result at the checkpoint a fine-tune started from, or None and why not: a start that is no
    run's checkpoint, a checkpoint without the result, or one that moved after the start (its result is of
    another epoch than the one recorded as loaded)."""
    if start.checkpoint is None:
        return None, "started from a file that is no run's best or last checkpoint"
    try:
        result = pick_result(base, attack, start.checkpoint, n_per_class=n_per_class)
    except CompareError:
        return None, f"{base.name} [{base.run_id}] has no {attack or 'robust'} result at {start.checkpoint}"
    got = result.get("epoch")
    if start.epoch is not None and isinstance(got, int) and got != start.epoch:
        return None, (f"started from epoch {start.epoch} of {base.name} [{base.run_id}], whose {start.checkpoint} "
                      f"result is of epoch {got} (the checkpoint moved after the start)")
    return Member(base, seed_of(base), result, summarise(result)), ""


def _budget_refusal(budget: list[str]) -> str:
    return "; ".join(budget) + " (the training budget: --allow-protocol-difference pairs them, naming it)"


def pair(group: Group, baseline: Group, bases: dict[str, RunView] | None = None, attack: str | None = None,
         checkpoint: str = "best", n_per_class: int = 0, against_start: bool = False,
         allow_protocol_difference: bool = False, effect: float = stats.EFFECT) -> Pairing:
    """``group`` against ``baseline``, seed by seed. A fine-tune whose every run names the run it started from
    (``method.init_from``), each found among the baseline's runs or ``bases`` and of the baseline's profile, is
    paired with those runs instead: at ``checkpoint``, or with ``against_start`` at the checkpoint each run started
    from (:func:`start_of`: what the fine-tune itself added). Only seeds both sides have are paired; the rest are
    dropped and named. Groups whose protocols differ are not paired (``reason``)."""
    out = Pairing(group.label, baseline.label)
    if not group.members or not baseline.members:
        out.reason = "a group has no run with the result"
        return out
    stop, budget = protocol_differences(group.members[0], baseline.members[0])
    if stop or (budget and not allow_protocol_difference):
        out.reason = stop or _budget_refusal(budget)
        return out
    base_by_seed = {m.seed: m for m in baseline.members}
    out.bases_searched = bool(bases)
    found, missing = _init_partners(group, baseline, bases or {}, attack, checkpoint, n_per_class)
    partners, out.bases_missing = (found, []) if found is not None and not missing else (None, missing if found else [])
    if against_start and found is not None and missing:  # the runs whose start is at hand; the others named
        partners, out.bases_missing = found, []
        out.starts_left_out += [f"{m.view.name} [{m.view.run_id}]: the run it started from, {init_run_id(m.view)}, is "
                                "not at hand (give --bases DIR)" for m in group.members if m.view.run_id not in found]
    if partners is not None:
        out.by_init = True
        out.pairs = [(m, partners[m.view.run_id]) for m in group.members if m.view.run_id in partners]
        if against_start:
            _pair_with_starts(out, attack, n_per_class)
    else:
        out.pairs = [(m, base_by_seed[m.seed]) for m in group.members if m.seed in base_by_seed]
        paired_seeds = {m.seed for m, _ in out.pairs}
        out.dropped_seeds = sorted((s for s in set(group.seeds) | set(base_by_seed) if s not in paired_seeds),
                                   key=lambda s: (s is None, s or 0))
    for a, b in out.pairs:
        stop, more = protocol_differences(a, b)
        if stop or (more and not allow_protocol_difference):
            out.reason = f"{a.view.run_id} against {b.view.run_id}: {stop or _budget_refusal(more)}"
            out.pairs = []
            break
        budget += [line for line in more if line not in budget]
    out.protocol_differences = budget if out.pairs else []
    for metric in PAIRED_METRICS:
        out.results[metric] = stats.paired([a.summary[metric] - b.summary[metric] for a, b in out.pairs], effect)
    out.rho = [metrics.rho(a.summary["avg_robust"], a.summary["worst_robust"], b.summary["avg_robust"],
                           b.summary["worst_robust"]) if b.summary["worst_robust"] > 0 and b.summary["avg_robust"] > 0
               else None for a, b in out.pairs]
    return out


def _pair_with_starts(out: Pairing, attack: str | None, n_per_class: int) -> None:
    """Each pair's baseline side moved to the checkpoint the fine-tune run started from; a run whose start has no
    result to pair is left out and named (``starts_left_out``)."""
    out.against = "start"
    pairs = []
    for m, base in out.pairs:
        start = start_of(m.view)
        member, why = start_member(base.view, start, attack, n_per_class) if start else (None, "no start recorded")
        if member is None:
            out.starts_left_out.append(f"{m.view.name} [{m.view.run_id}]: {why}")
            continue
        pairs.append((m, member))
        out.starts.append(start)
    out.pairs = pairs


def _init_partners(group: Group, baseline: Group, bases: dict[str, RunView], attack, checkpoint,
                   n_per_class) -> tuple[dict[str, Member] | None, list[int | None]]:
    """run id -> the Member of the run it started from, for every run of ``group`` whose start is at hand and of
    the baseline's profile, and the seeds whose start is not at hand; None where a start is of another profile (pair
    by seed). A fine-tune of the baseline whose bases were retrained elsewhere (no ``--bases``) is then paired by
    seed, with runs it did not start from, which the report says; ``--against-start`` leaves those runs out."""
    known = {m.view.run_id: m for m in baseline.members}
    base_profile = profile_name(baseline.members[0].view)
    out, missing = {}, []
    for m in group.members:
        ref = init_run_id(m.view)
        if ref in known:
            out[m.view.run_id] = known[ref]
            continue
        view = bases.get(ref or "")
        if view is None and ref:
            missing.append(m.seed)  # a start not at hand: of this baseline's profile or not, unknown
            continue
        if view is None or profile_name(view) != base_profile:
            return None, []  # not a fine-tune, or one of another profile's runs
        try:
            result = pick_result(view, attack, checkpoint, n_per_class=n_per_class)
        except CompareError:
            return None, []
        out[m.view.run_id] = Member(view, seed_of(view), result, summarise(result))
    return out, sorted(missing, key=lambda s: (s is None, s or 0))  # missing: the seeds whose start is not at hand


def _num(x: float | None) -> float | None:
    """JSON has no NaN: an undefined number is null."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _mean_or_nan(values: list[float | None]) -> float:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else math.nan


# -- the whole comparison --------------------------------------------------------------------------------------

@dataclass
class GroupComparison:
    attack: str | None
    checkpoint: str
    groups: list[Group]
    baseline: str | None
    pairings: list[Pairing]
    class_names: list[str]
    left_out: list[str] = field(default_factory=list)  # runs left out before any group (unreadable, cut), and
    # the runs of groups left with none, each line naming where it was left out of, the run and why

    def left_out_lines(self) -> list[str]:
        """Every run left out, and why: of each group, then before grouping and of the groups left empty."""
        return [f"left out of {g.label}: {line}" for g in self.groups for line in g.left_out] + self.left_out

    def to_json(self) -> dict:
        return {"checkpoint": self.checkpoint, "attack": self.attack, "baseline": self.baseline,
                "left_out": self.left_out_lines(),
                "units": "fractions in [0, 1]; differences in fractions; CV (class-wise variance, not std/mean) in fraction^2",
                "class_names": self.class_names,
                "groups": [g.to_json() for g in self.groups],
                "paired": [e for p in self.pairings if p.reason is None for e in p.entries()],
                "not_paired": [{"group": p.group, "baseline": p.baseline, "reason": p.reason}
                               for p in self.pairings if p.reason is not None]}


def compare_groups(named: dict[str, list[RunView]], baseline: str | None = None, attack: str | None = None,
                   checkpoint: str = "best", n_per_class: int = 0, bases: dict[str, RunView] | None = None,
                   against_start: bool = False, allow_protocol_difference: bool = False,
                   effect: float = stats.EFFECT, left_out: list[str] | None = None,
                   family: str = "table") -> GroupComparison:
    """Groups (label -> runs) with their statistics, and each against ``baseline`` (a label) when given; with
    ``against_start``, a fine-tune of the baseline against the checkpoints its runs started from (:func:`pair`).
    ``left_out``: lines naming the runs left out before grouping, carried into every output; ``family``: the Holm
    families (:func:`family_key`)."""
    if not named:
        raise CompareError("no group to compare: name runs with --group LABEL=RUN,RUN or select them with --by")
    if against_start and baseline is None:
        raise CompareError("--against-start pairs fine-tunes with the checkpoints they started from: give --baseline "
                           "LABEL, the group of the runs they started from")
    if baseline is not None and baseline not in named:
        from fairtui.runs.configurations import shipped_group

        baseline = shipped_group(baseline, named) or baseline  # the shipped profile's group, among its variants
    if baseline is not None and baseline not in named:
        raise CompareError(f"--baseline {baseline!r} is not a group; the groups are: {', '.join(named)}")
    groups = [build_group(label, views, attack, checkpoint, n_per_class) for label, views in named.items()]
    empty = [g.label for g in groups if not g.members]
    if len(empty) == len(groups):
        raise CompareError(f"no run of any group has a {attack or 'robust'} result at {checkpoint}: "
                           + "; ".join(g.left_out[0] for g in groups if g.left_out))
    left_out = list(left_out or [])
    for g in groups:  # a group every run of which was left out is not in the tables, but its runs are named
        if not g.members:
            left_out += [f"left out of {g.label}: {line}" for line in g.left_out]
            left_out.append(f"{g.label}: every run left out, so the group is not in the tables")
    groups = [g for g in groups if g.members]
    # the per-class columns are labelled by the baseline's classes (the table is read against it), else the first
    # group's: a digits quickstart group beside CIFAR-10 groups labelled them 0-9
    named_by = next((g for g in groups if g.label == baseline), groups[0])
    names = named_by.members[0].view.class_names()
    pairings = []
    if baseline is not None:
        base = next((g for g in groups if g.label == baseline), None)
        if base is None:
            raise CompareError(f"the baseline group {baseline!r} has no run with a {attack or 'robust'} result at "
                               f"{checkpoint}")
        pairings = [pair(g, base, bases, attack, checkpoint, n_per_class, against_start, allow_protocol_difference,
                         effect) for g in groups if g is not base]
        adjust_in_families([p for p in pairings if p.reason is None], {g.label: g for g in groups}, family)
        for p in pairings:
            if p.reason is None:
                p.cpus = pairing_cpu_lines(p)
    return GroupComparison(attack, checkpoint, groups, baseline, pairings, names, left_out)

