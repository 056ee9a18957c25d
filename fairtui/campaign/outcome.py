"""What a judgement's outcome says beside its look: the verdict with the failed seeds counted as losses, and the
`--json` document of `fairtui judge`."""

from __future__ import annotations

from typing import Any

from fairtui.campaign.judging import METHOD, Look, Spec
from fairtui.judge import stats


def counted_as_losses(look: Look, spec: Spec, roles: dict[int, str]) -> dict[str, Any] | None:
    """STATS.md: a failed seed is an outcome. The verdict with each seed whose method run failed counted as a loss,
    its difference the worst one observed (a baseline's failure says nothing of the method and stays left out);
    None when no method run failed or nothing landed."""
    failed = sorted(s for s, role in roles.items() if role == METHOD and s in spec.seeds)
    diffs = look.differences()
    if not failed or not diffs:
        return None
    worst = min(diffs)
    counted = diffs + [worst] * len(failed)
    if spec.until_decided:
        seq = stats.sequential(counted, len(spec.seeds), spec.alpha)
        verdict, interval = seq.verdict, seq.interval
    else:
        r = stats.paired(counted, spec.effect)
        verdict, interval = r.verdict, r.ci95
    return {"failed_seeds": failed, "loss": worst, "n": len(counted), "mean": sum(counted) / len(counted),
            "interval": list(interval), "verdict": verdict}


def to_json(look: Look, spec: Spec, failed: dict[int, str], roles: dict[int, str] | None = None) -> dict[str, Any]:
    doc = look.comparison.to_json() if look.comparison else None
    return {"judge": spec.key, "method": spec.method.label, "baseline": spec.baseline.label,
            "metric": spec.metric, "checkpoint": spec.checkpoint, "seeds_landed": look.seeds,
            "until_decided": spec.until_decided, "max_seeds": len(spec.seeds) if spec.until_decided else None,
            "sequential": look.sequential.to_json() if look.sequential else None,
            "failed": [failed[s] for s in sorted(failed)], "failed_counted_as_losses": counted_as_losses(
                look, spec, roles or {}), "comparison": doc}
