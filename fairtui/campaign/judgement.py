"""What a judgement is (fairtui.campaign.judging runs it): its sides (the method, the baseline, a distillation's
teacher), its settings and key, and a look at the pairs landed so far."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from fairtui.judge import stats
from fairtui.judge.groups import GroupComparison
from fairtui.runs.runfolder import RunView

METHOD, BASELINE, TEACHER = "method", "baseline", "teacher"
KEY_IGNORES = ("seed", "name", "description")


@dataclass
class Side:
    """The method or the baseline: its label, the resolved profile table its new runs train (with their seed), the
    file it came from, and (the baseline) its committed runs by seed."""

    label: str
    table: dict
    profile_path: str
    committed: dict[int, RunView] = field(default_factory=dict)
    stem: str = ""  # its new runs' name before -s<seed>: the profile's name and what the overrides change


@dataclass
class Spec:
    method: Side
    baseline: Side
    seeds: list[int]  # the seeds to judge; with until_decided, the order to take them in (0 .. max - 1)
    until_decided: bool = False
    metric: str = "worst_robust"
    checkpoint: str = "best"
    effect: float = stats.EFFECT
    allow_protocol_difference: bool = False
    bases: dict = field(default_factory=dict)
    pool: list[str] = field(default_factory=lambda: ["cpu"])
    request: dict = field(default_factory=dict)  # what was asked (fairtui.campaign.spec.Request), kept in the record
    # the baseline's seeds trained here because its committed runs trained on another kind of CPU (spec.py)
    baseline_here: list[int] = field(default_factory=list)
    # the run ids of the baseline's committed runs the judgement was read against, wherever its seeds train
    baseline_sources: list[str] = field(default_factory=list)
    # a distillation's teacher profile: each seed's teacher run trains first, as a base (paired with nothing)
    teacher: Side | None = None
    # the safe t-test's level: 1 / alpha is the e-value that decides; ALPHA / m for each of a family of m methods
    alpha: float = stats.ALPHA

    @property
    def key(self) -> str:
        """What decides the verdict, hashed: the method's resolved profile (up to its seed, name, thread count and
        where its data lies: data.root is a location, not a setting), the baseline's label and the committed runs
        it was read from, the metric and the checkpoint, and the seeds trained here for another CPU. Two commands
        that differ in any of these are two judgements, each with its record and runs."""
        method = {k: v for k, v in self.method.table.items() if k not in KEY_IGNORES}
        method["train"] = {k: v for k, v in (method.get("train") or {}).items() if k != "threads"}
        method["data"] = {k: v for k, v in (method.get("data") or {}).items() if k != "root"}
        what = {"method": method, "baseline": self.baseline.label, "baseline_runs": self.baseline_sources,
                "metric": self.metric, "checkpoint": self.checkpoint}
        if self.baseline_here:  # another judgement than the one that pairs with the committed runs
            what["baseline_trained_here"] = self.baseline_here
        if self.until_decided and self.alpha != stats.ALPHA:  # a family's member stops at another e-value
            what["alpha"] = self.alpha
        if self.teacher is not None:  # the teacher's profile decides the students' numbers too
            what["teacher"] = {k: v for k, v in self.teacher.table.items() if k not in KEY_IGNORES}
        text = json.dumps(what, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclass
class Look:
    """The paired comparison after the pairs landed so far, in their landing order."""

    comparison: GroupComparison | None  # None before the first pair
    seeds: list[int]  # landed, in order
    sequential: stats.Sequential | None
    final: bool = False
    metric: str = "worst_robust"

    @property
    def pairing(self):
        return self.comparison.pairings[0] if self.comparison and self.comparison.pairings else None

    def differences(self) -> list[float]:
        p = self.pairing
        if p is None or p.reason is not None:
            return []
        by_seed = {a.seed: a.summary[self.metric] - b.summary[self.metric] for a, b in p.pairs}
        return [by_seed[s] for s in self.seeds if s in by_seed]
