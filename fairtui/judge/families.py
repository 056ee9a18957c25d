"""The families Holm's adjustment runs over, declared: which pairings of a comparison share one adjustment.

STATS.md: the family is declared, not whatever a command happened to hold. By default (``table``) the groups read
from one folder of committed runs form one family (the table they were committed as: their adjusted p does not move
when a user's own runs sit in the home), and a group of the home's runs is a family of its own; ``all`` puts every
group of the command in one. Within a family the worst class (primary: it decides) and the average (secondary) are
adjusted separately, at the comparison's one checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairtui.judge import stats
from fairtui.judge.compare import CompareError

if TYPE_CHECKING:  # the groups' types by name only: importing fairtui.judge.groups here would make a circle
    from fairtui.runs.runfolder import RunView

FAMILIES = ("table", "all")
PAIRED_METRICS = ("worst_robust", "avg_robust")


def source_of(view: "RunView") -> str:
    """Where a run's files lie: "home" for a run of a fairtui home (its folder beside the home's runs.json), else the
    folder of committed run files it was read from (``<results>/<profile>/<run-id>``: the results folder)."""
    home = view.run_dir.parent.parent
    return "home" if (home / "runs.json").is_file() or view.run_dir.parent.name == "runs" else str(home)


def family_key(group: "Group", family: str) -> str:
    """The Holm family of a group paired with the baseline. ``table`` (the default): the groups of one folder of
    committed runs are one family, the table they were committed as, so their adjusted p never moves with a user's
    own runs; a group of the home's runs (or of several sources) is a family of its own. ``all``: one family of every
    group of the command."""
    if family == "all":
        return "the groups of this command"
    sources = {source_of(m.view) for m in group.members}
    if len(sources) == 1 and "home" not in sources:
        return f"{sources.pop()} (committed)"
    return f"{group.label} alone ({'the home' if sources == {'home'} else 'several sources'})"


def adjust_in_families(paired: "list[Pairing]", groups: "dict[str, Group]", family: str = "table") -> None:
    """Holm's adjustment in each declared family (:func:`family_key`), separately for the primary metric (the worst
    class, which decides) and the secondary (the average), at the comparison's one checkpoint."""
    if family not in FAMILIES:
        raise CompareError(f"--family must be one of {', '.join(FAMILIES)}, got {family!r}")
    keys = {p.group: family_key(groups[p.group], family) for p in paired}
    for key in dict.fromkeys(keys.values()):
        members = [p for p in paired if keys[p.group] == key]
        for p in members:
            p.family, p.family_groups = key, [m.group for m in members]
        for metric in PAIRED_METRICS:
            for p, adjusted in zip(members, stats.holm([m.results[metric].p_family for m in members])):
                p.results[metric].p_holm = adjusted
