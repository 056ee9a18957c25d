"""`fairtui judge PROFILE --baseline LABEL`: train a method's seeds beside a baseline's and say whether it is better,
in one command (fairtui.campaign.judging)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairtui.cli.groups import AllowProtocol, Bases, Effect, Results
from fairtui.cli.options import Home, HomeT, Json, fail

HELP = ("Judge a method against a baseline in one command: train its runs for the baseline's seeds (and the "
        "baseline's own where none is committed) on the CPU's slots, print the paired comparison as pairs land, and "
        "end with a verdict; --until-decided adds seeds until an anytime-valid test knows. Ctrl-C, then the same "
        "command, continues.")
METRICS = {"worst": "worst_robust", "avg": "avg_robust"}


def judge(
    profile: str = typer.Argument(..., help="the method's TOML profile"),
    baseline: str = typer.Option(..., "--baseline", help="the baseline: a group label of --results or the home "
                                 "(a profile's name, as `compare --by profile` shows it), or a profile to train"),
    results: List[Path] = Results,
    bases: List[Path] = Bases,
    set_: List[str] = typer.Option([], "--set", help="override a key of the method's profile (repeatable)"),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="the seeds, e.g. 0-4 or 0,2,5 (default: the "
                                        "baseline's committed seeds)"),
    until_decided: bool = typer.Option(False, "--until-decided", help="take seeds 0, 1, ... until the safe t-test "
                                       "decides (its error rate holds however often it looks), at most --max-seeds"),
    max_seeds: int = typer.Option(10, "--max-seeds", min=2, help="with --until-decided: the most seeds to train"),
    metric: str = typer.Option("worst", "--metric", help="worst (the worst class's robust accuracy) or avg"),
    checkpoint: str = typer.Option("best", "--checkpoint", help="the checkpoint both sides are read at"),
    effect: float = Effect,
    allow_protocol_difference: bool = AllowProtocol,
    gpus: Optional[str] = typer.Option(None, "--gpus", help="the GPUs to spread the runs over (default: the CPU)"),
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    from engine.contract.profile_schema import ProfileError
    from fairtui.campaign.judging import Campaign
    from fairtui.runs.home import resolve_home

    if metric not in METRICS:
        raise fail(f"--metric must be worst or avg, got {metric!r}")
    if until_decided and seeds:
        raise fail("give --seeds or --until-decided (seeds 0 to --max-seeds - 1, in order), not both")
    try:
        spec = build_spec(profile, baseline, results, bases, list(set_), seeds, until_decided, max_seeds,
                          METRICS[metric], checkpoint, effect / 100, allow_protocol_difference, gpus, home)
    except (ProfileError, ValueError) as err:
        raise fail(str(err)) from None
    campaign = Campaign(resolve_home(home), spec)
    raise typer.Exit(follow(campaign, json_out))


def parse_seeds(text: str) -> list[int]:
    """"0-4" -> 0..4, "0,2,5", "0-2,7"; ValueError naming the option otherwise."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise ValueError(f"--seeds {text!r}: write seeds as 0-4 or 0,2,5")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    if not out or len(set(out)) != len(out):
        raise ValueError(f"--seeds {text!r}: no seeds, or a seed named twice")
    return out


def build_spec(profile, baseline, results, bases, overrides, seeds, until_decided, max_seeds, metric, checkpoint,
               effect, allow, gpus, home):
    """The judgement's sides, seeds and settings; ProfileError / ValueError for what cannot be judged."""
    from engine.contract.profile_io import apply_overrides, load_profile, read_toml
    from fairtui.campaign.judging import Side, Spec, committed_by_seed
    from fairtui.cli.groups import bases_views
    from fairtui.cli.launching import on_cpu

    pool = ["cpu"] if on_cpu(gpus) else [g.strip() for g in gpus.split(",")]
    written = apply_overrides(read_toml(profile), overrides)
    one_thread = pool == ["cpu"] and "threads" not in (written.get("train") or {})
    method_profile = load_profile(profile, overrides + (["train.threads=1"] if one_thread else []))
    shown = [o for o in overrides if not o.replace(" ", "").startswith("data.root=")]  # a location, not a setting
    label = method_profile.name + (f" ({', '.join(shown)})" if shown else "")
    method = Side(label, method_profile.to_table(), str(profile))
    baseline, base_views, base_table, base_path = find_baseline(baseline, results, home)
    committed, aside = committed_by_seed(base_views)
    for line in aside:
        typer.echo(f"left out of {baseline}: {line}", err=True)
    base_table = baseline_table(base_table, method.table, one_thread)
    check_protocol(method.table, base_table, label, baseline, allow)
    if until_decided:
        chosen = list(range(max_seeds))
    elif seeds:
        chosen = parse_seeds(seeds)
    elif committed:
        chosen = sorted(committed)
    else:
        raise ValueError(f"{baseline} has no committed runs to take the seeds from: give --seeds 0-4 or "
                         "--until-decided")
    if label == baseline:
        raise ValueError(f"the method and the baseline are both {baseline!r}: name a variant with --set, or "
                         "another profile")
    return Spec(method, Side(baseline, base_table, base_path, committed), chosen, until_decided, metric, checkpoint,
                effect, allow, bases_views(bases), pool)


def find_baseline(label: str, results: list[Path], home) -> tuple[str, list, dict, str]:
    """The baseline's label, its committed runs (a `--by profile` group of --results and the home, never a
    judgement's own runs), the resolved profile its new seeds train, and where that came from. A label that is no
    group is taken as a profile (a file, or profiles/<label>.toml), labelled by its name."""
    from engine.contract.profile_io import load_profile, read_toml
    from fairtui.cli.groups import load_views, results_pool
    from fairtui.judge.sources import grouped

    views = [v for v in load_views(home, results_pool(results))
             if not any(str(t).startswith("judge:") for t in v.meta.get("tags") or [])]
    groups = grouped(views, "profile")
    if label in groups:
        first = groups[label][0]
        return label, groups[label], read_toml(first.run_dir / "profile.toml"), str(first.run_dir / "profile.toml")
    for candidate in (Path(label), Path("profiles") / f"{label}.toml"):
        if candidate.is_file():
            profile = load_profile(candidate)
            return profile.name, [], profile.to_table(), str(candidate)
    known = ", ".join(groups) or "none"
    raise ValueError(f"--baseline {label!r} is no group of the runs searched ({len(results)} --results folder(s) "
                     f"and the home: {known}) and no profile file")


def baseline_table(table: dict, method: dict, one_thread: bool) -> dict:
    """The table the baseline's new seeds train: its own profile, on the method's data folder (a location, not a
    setting) and, on the CPU's slots, one thread."""
    out = {**table, "data": dict(table.get("data") or {}), "train": dict(table.get("train") or {})}
    mine = method.get("data") or {}
    if mine.get("dataset") == out["data"].get("dataset") and mine.get("root"):
        out["data"]["root"] = mine["root"]
    if one_thread:
        out["train"]["threads"] = 1
    return out


def check_protocol(method: dict, baseline: dict, label: str, base_label: str, allow: bool) -> None:
    """Refuse, before anything trains, a method whose runs could not be paired with the baseline's: one line naming
    each difference (the measurement always; the training budget unless allowed)."""
    from fairtui.judge.protocol import planned_differences

    lines = planned_differences(method, baseline)
    measured = [line for line in lines if line.startswith(("data.dataset", "eval.", "data.test_per_class"))]
    if measured or (lines and not allow):
        hint = "" if measured else " (the training budget: --allow-protocol-difference pairs them, naming it)"
        raise ValueError(f"{label} against {base_label}: " + "; ".join(measured or lines) + hint)
    for line in lines:
        typer.echo(f"warning: {label} against {base_label}: {line} (allowed)", err=True)


def follow(campaign, json_out: bool) -> int:
    """Run the campaign with its progress on stderr (one line a running run), an interim block as each pair lands,
    and the verdict; 130 after Ctrl-C (the runs stop after their batch; the same command continues)."""
    import json

    from rich.console import Console

    from fairtui.campaign.judging import to_json
    from fairtui.campaign.report import interim_lines, verdict_lines
    from fairtui.cli.launching import child_line, sweep_bars

    err = Console(stderr=True)
    spec = campaign.spec
    err.print(f"judge {campaign.spec.key}: {spec.method.label} against {spec.baseline.label}, "
              f"{'until decided, at most ' if spec.until_decided else ''}{len(spec.seeds)} seeds, "
              f"{campaign.slots} at once", soft_wrap=True)
    bar = sweep_bars(err)
    task = bar.add_task("", total=len(spec.seeds))
    lines = [bar.add_task("", total=None, visible=False) for _ in range(campaign.slots)]

    def on_tick(running) -> None:
        bar.update(task, completed=len(campaign.record["landed"]),
                   description=f"{spec.method.label}: pairs landed ({len(running)} running)")
        for i, line in enumerate(lines):
            text = child_line(campaign.home, [running[i].name]) if i < len(running) else ""
            bar.update(line, description=text, visible=bool(text))

    def on_look(look) -> None:
        for text in interim_lines(look, spec):
            bar.console.print(text, soft_wrap=True)

    try:
        with bar:
            look = campaign.run(on_tick, on_look)
    except KeyboardInterrupt:
        stopped = campaign.stop_rest()
        err.print(f"stopped: {len(stopped)} run(s) stop after their batch; the same command continues (the "
                  "landed seeds are kept, the others resume from their checkpoints)", soft_wrap=True)
        return 130
    if json_out:
        typer.echo(json.dumps(to_json(look, spec, campaign.failed)))
    else:
        Console(width=min(Console().width, 100)).print("\n".join(verdict_lines(look, spec, campaign.failed)),
                                                       soft_wrap=True)
    return 1 if campaign.failed or not look.seeds else 0
