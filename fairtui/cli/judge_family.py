"""`fairtui judge A.toml B.toml C.toml --baseline LABEL`: a table of methods against one baseline, trained once, with
the family's error rate kept (fairtui.campaign.family); the progress on stderr, an interim line as each pair lands,
the table at the end. Ctrl-C stops every run after its batch and the same command continues."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from fairtui.campaign.report import STOPPED
from fairtui.cli.options import fail
from fairtui.judge.stats import ALPHA


def judge_family(home: Path, specs: list, json_out: bool, settings=None) -> int:
    """``settings``: --launcher slurm's (each run a job), else None (this machine's slots)."""
    from rich.console import Console

    from fairtui.campaign.family import Family
    from fairtui.launch.slurm_queue import judge_queue

    try:
        family = Family(home, specs, queue=judge_queue(home, settings, "family"))
    except ValueError as err:
        raise fail(str(err)) from None
    if settings is not None:
        family.slots = settings.parallelism
    if not family.take_driver():
        raise fail(family.busy_text())
    err = Console(stderr=True)
    try:
        return _follow(family, json_out, err)
    except KeyboardInterrupt:
        err.print(STOPPED.format(n=len(family.stop_rest())), soft_wrap=True)
        return 130


def _follow(family, json_out: bool, err) -> int:
    from rich.console import Console

    from fairtui.campaign.family import family_lines, family_rows, rule_text
    from fairtui.campaign.outcome import to_json
    from fairtui.campaign.report import interim_lines
    from fairtui.cli.launching import child_line, sweep_bars

    spec = family.specs[0]
    err.print(f"judge family {family.key}: {', '.join(s.method.label for s in family.specs)} against "
              f"{spec.baseline.label}, {'until decided, at most ' if spec.until_decided else ''}{len(spec.seeds)} "
              f"seeds each, {family.slots} at once; {rule_text(family)}", soft_wrap=True)
    bar = sweep_bars(err)
    task = bar.add_task("", total=len(spec.seeds) * len(family.members))
    lines = [bar.add_task("", total=None, visible=False) for _ in range(family.slots)]

    def on_tick(running) -> None:
        landed = sum(len(m.record["landed"]) for m in family.members)
        bar.update(task, completed=landed, description=f"pairs landed, all methods ({len(running)} running)")
        for i, line in enumerate(lines):
            text = child_line(family.home, [running[i].name]) if i < len(running) else ""
            bar.update(line, description=text, visible=bool(text))

    def on_look(member, look) -> None:
        for text in interim_lines(look, member.spec):
            bar.console.print(f"{member.spec.method.label}: {text}", soft_wrap=True)

    try:
        with bar:
            family.run(on_tick, on_look)
    except KeyboardInterrupt:
        err.print(STOPPED.format(n=len(family.stop_rest())), soft_wrap=True)
        return 130
    if json_out:
        members = [to_json(family.looks[m.spec.method.label], m.spec, m.failed, m.failed_roles)
                   for m in family.members]
        typer.echo(json.dumps({"family": family.key, "rule": rule_text(family), "alpha": ALPHA,
                               "until_decided": spec.until_decided, "table": family_rows(family),
                               "methods": members}, default=str))
    else:
        Console(width=min(Console().width, 120)).print("\n".join(family_lines(family)), soft_wrap=True)
        for m in family.members:
            for seed in sorted(m.failed):
                typer.echo(f"failed: {m.failed[seed]} (left out; remove the run and run the same command to train it "
                           "again)")
    return 1 if family.failed or not all(look.seeds for look in family.looks.values()) else 0
