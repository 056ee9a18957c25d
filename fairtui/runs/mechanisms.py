"""What a run's method never did: a class-wise mechanism that never acted, read from the run's own files.

A CFA run whose FAWA gate never opened has no "fawa" checkpoint and is CFA without FAWA; its numbers must say
so wherever they are shown. The engine records it (a ``mechanism_inactive`` event, since the scaled protocols'
rule); runs older than that event are read from their epochs' ``fawa_accepted`` flags, so that committed tables
say it too.
"""

from __future__ import annotations

from fairtui.runs.runfolder import RunView

NAMES = {"fawa": "FAWA"}


def never_acted(view: RunView) -> list[str]:
    """The mechanisms (``"fawa"``) that never acted in a finished run, from its epochs."""
    gated = [e.get("method_state", {}).get("fawa_accepted") for e in view.epochs]
    gated = [g for g in gated if g is not None]
    return ["fawa"] if gated and not any(gated) else []


def never_acted_note(views: list[RunView], seed_of) -> list[str]:
    """One line a mechanism that never acted in some of ``views``: 'FAWA accepted no epoch in 4 of 5 runs (seeds
    0, 1, 2, 4): those are CFA without FAWA'."""
    out = []
    for mechanism, name in NAMES.items():
        seeds = [seed_of(v) for v in views if mechanism in never_acted(v)]
        if seeds:
            which = ", ".join(str(s) for s in seeds)
            out.append(f"{name} accepted no epoch in {len(seeds)} of {len(views)} runs (seed{'s' if len(seeds) > 1 else ''} "
                       f"{which}): those are CFA without FAWA (no fawa checkpoint)")
    return out
