"""`fairtui judge PROFILE --baseline LABEL`: train a method's seeds beside a baseline's and say whether it is better,
in one command (fairtui.campaign.judging); several profiles: a table of methods (fairtui.campaign.family)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairtui.cli.groups import AllowProtocol, Bases, Effect, Results
from fairtui.cli.launching import with_slurm_options
from fairtui.cli.options import Home, HomeT, Json, fail

HELP = ("Judge a method against a baseline in one command: train its runs for the baseline's seeds (and the "
        "baseline's own where none is committed) on the CPU's slots, print the paired comparison as pairs land, and "
        "end with a verdict; --until-decided adds seeds until an anytime-valid test knows. Several profiles: a table "
        "of methods against the one baseline, the family's 5% kept. --launcher slurm: each run a job. Ctrl-C, then "
        "the same command, continues.")
METRICS = {"worst": "worst_robust", "avg": "avg_robust"}


@with_slurm_options
def judge(
    profile: List[str] = typer.Argument(..., help="the method's TOML profile; several: a table of methods against "
                                        "the one baseline, the family's error rate kept (--set applies to each)"),
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
    baseline_cpu: str = typer.Option("here", "--baseline-cpu", help="where the baseline's seeds come from when its "
                                     "committed runs trained on another kind of CPU: here (train them on this "
                                     "machine, so that each pair is trained on one CPU) or committed (pair with them "
                                     "across CPUs, saying so)"),
    slurm: Optional[dict] = None,  # --launcher and the Slurm options (with_slurm_options)
    parallelism: Optional[int] = typer.Option(None, "--array-parallelism", min=1, help="slurm: the judgement's jobs "
                                              "at once (default 16)"),
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    from engine.contract.profile_schema import ProfileError
    from fairtui.campaign.judging import Campaign
    from fairtui.runs.home import resolve_home

    if metric not in METRICS:
        raise fail(f"--metric must be worst or avg, got {metric!r}")
    from fairtui.campaign.spec import Request, build_spec, check_pool
    from fairtui.launch.queue import pool_of

    from fairtui.cli.launching import slurm_settings
    from fairtui.launch.slurm_queue import judge_queue

    try:  # the app offers only the GPUs it sees; the command line checks what it was given
        settings = slurm_settings(gpus=gpus, parallelism=parallelism, **slurm)
        check_pool(pool_of(gpus), gpus)
    except (ProfileError, ValueError) as err:
        raise fail(str(err)) from None

    said: list[str] = []  # a line the members share (the baseline's CPU, its runs left out) is said once

    def warn(line: str) -> None:
        if line not in said:
            said.append(line)
            typer.echo(line, err=True)

    requests = [Request(str(one), baseline, [str(r) for r in results], [str(b) for b in bases], list(set_), seeds,
                        until_decided, max_seeds, METRICS[metric], checkpoint, effect / 100, allow_protocol_difference,
                        gpus, baseline_cpu) for one in profile]
    try:
        specs = [build_spec(request, resolve_home(home), warn=warn) for request in requests]
    except (ProfileError, ValueError) as err:
        raise fail(str(err)) from None
    if len(specs) > 1:
        from fairtui.cli.judge_family import judge_family

        raise typer.Exit(judge_family(resolve_home(home), specs, json_out, settings))
    (spec,) = specs
    from fairtui.campaign.spec import sibling_judgements

    if not (resolve_home(home) / "judges" / f"{spec.key}.json").exists():  # a new judgement: say which it is not
        for line in sibling_judgements(resolve_home(home), spec):
            typer.echo(line, err=True)
    try:
        campaign = Campaign(resolve_home(home), spec, queue=judge_queue(resolve_home(home), settings, spec.key))
    except ValueError as err:
        raise fail(str(err)) from None
    if settings is not None:  # the cluster's jobs at once
        campaign.slots = settings.parallelism
    if not campaign.take_driver():  # one driver a judgement: a second terminal trains nothing
        raise fail(campaign.busy_text())
    raise typer.Exit(follow(campaign, json_out))


def follow(campaign, json_out: bool) -> int:
    """Run the campaign with its progress on stderr (one line a running run), an interim block as each pair lands,
    and the verdict; 130 after Ctrl-C (the runs stop after their batch; the same command continues)."""
    from rich.console import Console

    from fairtui.campaign.report import STOPPED

    err = Console(stderr=True)
    try:
        return _follow(campaign, json_out, err)
    except KeyboardInterrupt:  # at any moment, the progress display's set-up included
        stopped = campaign.stop_rest()
        err.print(STOPPED.format(n=len(stopped)), soft_wrap=True)
        return 130


def _follow(campaign, json_out: bool, err) -> int:
    import json

    from rich.console import Console

    from fairtui.campaign.outcome import to_json
    from fairtui.campaign.report import STOPPED, interim_lines, next_look_text, verdict_lines
    from fairtui.cli.launching import child_line, sweep_bars

    spec = campaign.spec
    err.print(f"judge {campaign.spec.key}: {spec.method.label} against {spec.baseline.label}, "
              f"{'until decided, at most ' if spec.until_decided else ''}{len(spec.seeds)} seeds, "
              f"{campaign.slots} at once", soft_wrap=True)
    bar = sweep_bars(err)
    task = bar.add_task("", total=len(spec.seeds))
    lines = [bar.add_task("", total=None, visible=False) for _ in range(campaign.slots)]

    def on_tick(running) -> None:
        from fairtui.runs.runfolder import RunView

        runs = campaign.runs()
        method_runs = {d.name for (role, _), d in runs.items() if role == "method"}
        queued = sum(1 for d in runs.values() if RunView.load(d).status() == "queued") if not running else 0
        bar.update(task, completed=len(campaign.record["landed"]),
                   description=f"{spec.method.label}: pairs landed ({len(running)} running; "
                               f"{next_look_text(running, method_runs, queued)})")
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
        err.print(STOPPED.format(n=len(stopped)), soft_wrap=True)
        return 130
    if json_out:
        typer.echo(json.dumps(to_json(look, spec, campaign.failed, campaign.failed_roles)))
    else:
        Console(width=min(Console().width, 100)).print("\n".join(verdict_lines(look, spec, campaign.failed, campaign.failed_roles)),
                                                       soft_wrap=True)
    return 1 if campaign.failed or not look.seeds else 0
