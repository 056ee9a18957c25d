"""A table of methods against one baseline in one command (`fairtui judge A.toml B.toml C.toml --baseline LABEL`):
each method is a judgement of its own (fairtui.campaign.judging.Campaign) and the baseline's runs are shared, so a
baseline seed trains once whatever the number of methods.

The family's error rate. Each method's verdict would keep its own 5%; a table of m of them keeps the family's:

- with ``--until-decided``, each method is decided when its e-value reaches m / alpha (e-Bonferroni: Vovk and Wang,
  "E-values: calibration, combination and applications", Annals of Statistics 49, 2021, section 4). Each member's
  e-process is anytime-valid, so by Ville's inequality a null member ever reaches m / alpha with probability at most
  alpha / m, and by the union bound some null member does with probability at most alpha, whatever the dependence
  between the members (they share the baseline's seeds) and however often each is looked at. Each method stops on
  its own and a decision is never taken back. e-BH (Wang and Ramdas, JRSS-B 84, 2022) would reject more but controls
  the false discovery rate, not the family-wise one, and its rejections depend on every member's e-value at once,
  so a method could be decided and then undecided as the others move: a paper's table wants each row final.
- with fixed seeds, Holm over the m methods' p-values of the metric (as `compare` adjusts a table's groups).

What each costs in seeds is measured by the simulation in tests/fairtui/test_family.py (docs/judging.md)."""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from fairtui.campaign.driver import DriverLock
from fairtui.campaign.judging import Campaign, Look, Spec
from fairtui.judge import stats
from fairtui.launch.queue import LocalQueue


def family_specs(specs: list[Spec]) -> list[Spec]:
    """The members' specs at the family's level: with --until-decided each stops at e-value m / alpha."""
    labels = [s.method.label for s in specs]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"{twice[0]} is named twice: a family's methods are distinct profiles or variants")
    for i, a in enumerate(specs):
        for b in specs[i + 1:]:
            if a.key == b.key:
                raise ValueError(f"{a.method.label} and {b.method.label} train the same profile (the same settings "
                                 "once resolved): judge one of them")
    if len({s.baseline.label for s in specs}) != 1:
        raise ValueError("a family's methods are judged against one baseline")
    return [replace(s, alpha=stats.ALPHA / len(specs)) for s in specs]


class Family:
    def __init__(self, home: Path, specs: list[Spec], queue: LocalQueue | None = None):
        self.home = home
        self.specs = family_specs(specs)
        self.key = hashlib.sha256(" ".join(sorted(s.key for s in self.specs)).encode()).hexdigest()[:10]
        self.queue = queue or LocalQueue(home, worker=True)
        self.shared: dict[int, Path] = {}  # the baseline's runs by seed, whichever member made them
        self.members = [Campaign(home, s, self.queue, baseline_key=self.key, shared=self.shared) for s in self.specs]
        self.driver_lock = DriverLock(home / "judges" / f"family-{self.key}.lock")
        self.looks: dict[str, Look] = {}
        self.slots = self.members[0].slots
        self._record()

    def _record(self) -> None:
        """``<home>/judges/family-<key>.json``: the members' requests, so that the app reopens the family as it was
        asked (a member alone would be another judgement: its own level and its own baseline runs); each member's
        record names the family."""
        from engine.contract.atomic import atomic_write_json

        path = self.home / "judges" / f"family-{self.key}.json"
        if not path.exists():
            atomic_write_json(path, {"key": self.key, "baseline": self.specs[0].baseline.label,
                                     "members": [s.key for s in self.specs],
                                     "requests": [s.request for s in self.specs], "created": time.time()})
        for member in self.members:
            if member.record.get("family") != self.key:
                member.record["family"] = self.key
                member._save()

    def take_driver(self) -> bool:
        """The family's one driver drives every member; False when another process drives it (or one of them)."""
        if not (self.driver_lock.held or self.driver_lock.take()):
            return False
        return all(m.take_driver() for m in self.members)

    def busy_text(self) -> str:
        return self.driver_lock.busy_text(f"family-{self.key}")

    def step(self, on_look: Callable[[Campaign, Look], None] = lambda member, look: None) -> tuple[bool, list[Path]]:
        """One look at every member not yet final (each decides, or runs out of seeds, on its own). Whether the
        family is done, and the running runs. Once it is, the shared baseline runs no member needs are stopped."""
        running: dict[str, Path] = {}
        for member in self.members:
            label = member.spec.method.label
            if label in self.looks and self.looks[label].final:
                continue
            look, runs = member.step(lambda look, member=member: on_look(member, look))
            self.looks[label] = look
            running.update({d.name: d for d in runs})
        done = all(look.final for look in self.looks.values()) and len(self.looks) == len(self.members)
        if done:
            self.stop_rest()
        return done, list(running.values())

    def run(self, on_tick: Callable[[list[Path]], None], on_look: Callable[[Campaign, Look], None],
            interval: float = 1.0) -> dict[str, Look]:
        while True:
            done, running = self.step(on_look)
            if done:
                return self.looks
            on_tick(running)
            time.sleep(interval)

    def stop_rest(self) -> list[str]:
        """Ctrl-C, or the family decided: every member's queued and running runs, the shared baseline's too."""
        out: list[str] = []
        for member in self.members:
            out += [r for r in member.stop_rest(everything=True) if r not in out]
        return out

    @property
    def failed(self) -> bool:
        return any(m.failed for m in self.members)


def open_family(home: Path, key: str, queue=None) -> Family:
    """The family of ``<home>/judges/family-<key>.json``, as it was asked (the app's judge screen)."""
    import json

    from fairtui.campaign.spec import Request, build_spec

    record = json.loads((home / "judges" / f"family-{key}.json").read_text())
    return Family(home, [build_spec(Request.from_json(r), home) for r in record["requests"]], queue)


def family_rows(family: Family) -> list[dict]:
    """The paper's table: a row a method, its difference from the baseline on the judged metric and on the other
    one (worst class, average) with their intervals, the seeds, and the family's decision: the e-value against
    m / alpha (--until-decided) or the Holm-adjusted p (fixed seeds)."""
    rows = []
    for member in family.members:
        spec, look = member.spec, family.looks.get(member.spec.method.label)
        p = look.pairing if look is not None else None
        row = {"method": spec.method.label, "seeds": look.seeds if look else [], "paired": p is not None
               and p.reason is None, "reason": p.reason if p is not None else "no pair landed"}
        if row["paired"]:
            for metric in ("worst_robust", "avg_robust"):
                r = p.results[metric]
                row[metric] = {"mean": r.mean, "ci95": list(r.ci95), "p": r.p_family}
            if look.sequential is not None:
                s = look.sequential
                row["sequential"] = s.to_json()
                row["decision"] = stats.decision(s.verdict) if s.decided else None
                row["verdict"] = s.verdict
        rows.append(row)
    metric = family.specs[0].metric
    if not family.specs[0].until_decided:  # Holm over the members that paired, on the judged metric
        paired = [r for r in rows if r["paired"] and not math.isnan(r[metric]["p"])]
        for row, adjusted in zip(paired, stats.holm([r[metric]["p"] for r in paired])):
            row["p_holm"] = adjusted
            better = row[metric]["mean"] > 0
            row["decision"] = ("better" if better else "worse") if adjusted < stats.ALPHA else None
            row["verdict"] = row["decision"] or f"not distinguishable at {len(row['seeds'])} seeds (Holm)"
    return rows


def rule_text(family: Family) -> str:
    m = len(family.members)
    if family.specs[0].until_decided:
        return (f"the family's error rate: {m} methods, each decided when its e-value reaches {m / stats.ALPHA:g} "
                f"(e-Bonferroni, {stats.ALPHA:g} / {m} each: some method of no effect is ever decided with "
                f"probability at most {stats.ALPHA:g}, however often each is looked at)")
    return (f"the family's error rate: {m} methods, their paired t-tests' p adjusted by Holm over the {m} (some "
            f"method of no effect is called better or worse with probability at most {stats.ALPHA:g})")


def family_lines(family: Family) -> list[str]:
    """The family's verdict as a paper's table (Markdown), the rule above it and each method's reason below."""
    from fairtui.campaign.report import METRIC_WORDS, _interval, level_text
    from fairtui.judge.group_report import p_text, pct, seeds_text

    spec = family.specs[0]
    until = spec.until_decided
    other = "avg_robust" if spec.metric == "worst_robust" else "worst_robust"
    first = next((look for look in family.looks.values() if look.comparison), None)
    setting = first.comparison.groups[0].setting() if first else "-"
    judged = METRIC_WORDS[spec.metric] + (f" (anytime-valid {level_text(spec.alpha)})" if until else " (95% t)")
    out = [f"judge family {family.key}: {len(family.members)} methods against {spec.baseline.label}, robust accuracy "
           f"at {spec.checkpoint} ({setting}), points against the baseline", rule_text(family), "",
           f"| method | {judged} | {METRIC_WORDS[other]} (95% t) | seeds | {'e-value' if until else 'Holm p'} | verdict |",
           "|---|---|---|---|---|---|"]
    rows = family_rows(family)
    for row in rows:
        if not row["paired"]:
            out.append(f"| {row['method']} | - | - | {len(row['seeds'])} | - | {row['reason']} |")
            continue
        r, o = row[spec.metric], row[other]
        if until:
            seq = family.looks[row["method"]].sequential
            interval, last = _interval(*seq.interval), "-" if math.isnan(seq.e_value) else f"{seq.e_value:.3g}"
        else:
            interval, last = _interval(*r["ci95"]), p_text(row["p_holm"]) if "p_holm" in row else "-"
        out.append(f"| {row['method']} | {pct(r['mean'], True)} {interval} | {pct(o['mean'], True)} "
                   f"{_interval(*o['ci95'])} | {len(row['seeds'])} ({seeds_text(row['seeds'])}) | {last} | "
                   f"{row.get('verdict', '-')} |")
    decided = [row["method"] for row in rows if row.get("decision")]
    out += ["", f"decided: {', '.join(decided) if decided else 'none'} (at the family's error rate)"]
    return out
