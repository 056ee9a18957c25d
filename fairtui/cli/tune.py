"""`fairtui tune PROFILE --space KEY=SPEC ... --trials N --objective NAME`: a study on Optuna (fairtui.tune.study)."""

from __future__ import annotations

import contextlib
from typing import List, Optional

import typer

from fairtui.cli.options import Gpus, Home, HomeT, Json, fail
from fairtui.cli.launching import with_slurm_options

HELP = ("Tune a profile with the same budget for every method: Optuna's TPE over --space KEY=LOW:HIGH[:log] or "
        "KEY=A,B,..., --trials runs on the validation split (the test split once, for the best), pruned each "
        "epoch; `fairtui tune STUDY --resume`, `fairtui tune show STUDY`, `fairtui tune finish STUDY`.")


@with_slurm_options
def tune(
    target: str = typer.Argument(..., metavar="PROFILE|STUDY|show|finish"),
    study_ref: Optional[str] = typer.Argument(None, metavar="[STUDY]", help="after show or finish"),
    space: List[str] = typer.Option([], "--space", help="KEY=LOW:HIGH[:log] (a float or int range) or KEY=A,B,... "
                                    "(choices); repeatable"),
    trials: int = typer.Option(0, "--trials", min=0, help="the study's budget of trials"),
    objective: str = typer.Option("avg_worst", "--objective", help="worst, avg_worst, or worst_at_avg:FLOOR "
                                  "(a fraction, or RUN-POINTS: a baseline run's validation average minus points)"),
    parallel: int = typer.Option(1, "--parallel", min=1, help="trials at once (through the queue, or Slurm jobs "
                                 "in flight with --launcher slurm)"),
    study: Optional[str] = typer.Option(None, "--study", help="the study's name (default: the profile's name and "
                                        "a time stamp)"),
    pruner: str = typer.Option("median", "--pruner", help="median, hyperband or none"),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="the sampler's seed (0 to 2^32 - 1)"),
    set_: List[str] = typer.Option([], "--set", help="KEY=VALUE for every trial, as fairtui run's"),
    resume: bool = typer.Option(False, "--resume", help="continue the study named STUDY"),
    gpus: Optional[str] = Gpus,
    slurm: Optional[dict] = None,  # --launcher and the Slurm options (with_slurm_options)
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import dataclasses
    import json

    from engine.contract.profile_schema import ProfileError
    from fairtui.cli.launching import slurm_settings

    from fairtui.tune import study as t
    from fairtui.tune import driver as td
    from fairtui.runs.home import resolve_home

    home_dir = resolve_home(home)
    say = (lambda line: typer.echo(line, err=True))
    try:
        if target == "show" and not study_ref:  # the home's studies
            names = t.studies(home_dir)
            if json_out:
                typer.echo(json.dumps({"studies": names}))
            else:
                typer.echo("\n".join(names) if names else f"no study in {home_dir / t.STUDIES}")
            return
        if target in ("show", "finish") and study_ref:
            st, req = t.load(home_dir, study_ref, to_run=target == "finish")
            if target == "finish":
                record = td.finish(st, req, say)
                if json_out:
                    typer.echo(json.dumps(record))
                return
            doc = t.summary(st, req)
            typer.echo(json.dumps(doc) if json_out else render(doc))
            return
        if resume:
            st, req = t.load(home_dir, target)
        else:
            try:  # each trial a Slurm job of its own, or None: the local queue
                settings = slurm_settings(gpus=gpus, **slurm)
            except ProfileError as err:
                raise fail(str(err)) from None
            st, req = _new_study(target, space, trials, objective, parallel, study, pruner, seed, list(set_), gpus,
                                 home_dir, say, dataclasses.asdict(settings) if settings else None)
        driver = td.Driver(st, req, say)
        try:
            with _signals_interrupt(driver):
                driver.run()
        except KeyboardInterrupt:
            driver.stop()
            raise fail(f"stopped; the trials' runs stop after their batch: fairtui tune {req.study} --resume "
                       "continues the study", 130) from None
        if driver.held:
            raise fail(f"{len(driver.held)} trial(s) ended for the machine's reasons "
                       f"({', '.join(sorted(set(driver.held.values())))}), not counted: free the machine, then "
                       f"fairtui tune {req.study} --resume resumes them", 1)
        record = td.finish(st, req, say)
        doc = t.summary(st, req)
        typer.echo(json.dumps({**doc, "finished": record}) if json_out else render(doc))
    except t.TuneError as err:
        raise fail(str(err)) from None
    except t.StorageError as err:  # a full or read-only disk: the command failed, nothing is lost
        raise fail(str(err), 1) from None


@contextlib.contextmanager
def _signals_interrupt(driver):
    """Ctrl-C, SIGTERM and SIGHUP (a closed terminal) stop the driver alike: its trials' runs stop cleanly, marked
    as stopped with their study, and nothing is left queued that only this driver would start. The stop comes
    between the driver's steps, never inside one (:meth:`fairtui.tune.driver.Driver.interrupt`)."""
    import signal

    def interrupt(signum, frame):
        driver.interrupt()

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def render(doc: dict) -> str:
    """The trials table, the best trial and the parameters' importance, as text (the objective in %, as the
    app shows it)."""
    from fairtui.tune import study as t

    keys = list(doc["space"])
    lines = [f"study {doc['study']} ({doc['profile_path']}): objective {doc['objective']} on validation, "
             f"{len(doc['trials'])} of {doc['budget']} trials, pruner {doc['pruner']}"]
    head = ["trial", "state", "objective", *keys, "run"]
    rows = [[str(r["trial"]), r["state"], t.objective_text(r["value"]),
             *(_cell(r["params"].get(k)) for k in keys), r["run_id"] or "-"] for r in doc["trials"]]
    best = (doc.get("best") or {}).get("trial")
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + ("  <- best" if r[0] == str(best) else ""))
    if doc.get("importance"):
        lines.append("importance: " + ", ".join(f"{k} {v:.2f}" for k, v in doc["importance"].items()))
    if doc.get("finished"):
        f = doc["finished"]
        lines.append(f"test split: trial {f['trial']}'s run {f['run_id']} ({f['attacks']}): fairtui show {f['run_id']}")
    from fairtui.runs.usertext import inert

    return "\n".join(inert(line) for line in lines)  # a journal is input: its names never reach the terminal raw


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _new_study(target: str, space: list[str], trials: int, objective: str, parallel: int, study: str | None,
               pruner: str, seed: int, set_: list[str], gpus: str | None, home_dir, say, slurm: dict | None = None):
    """Check everything a study needs before it exists, then make it: (the study, its request)."""
    import time
    from pathlib import Path

    from engine.contract.profile_io import load_profile
    from engine.contract.profile_schema import ProfileError
    from fairtui.tune import study as t
    from fairtui.tune import space as space_
    from fairtui.launch.launcher import resolve_init_from

    if not Path(target).is_file():
        raise t.TuneError("PROFILE", f"no profile file {target!r} (to continue a study: fairtui tune STUDY "
                          "--resume)")
    if trials < 1:
        raise t.TuneError("--trials", "give the study's budget, at least 1")
    if not space:
        raise t.TuneError("--space", "give at least one KEY=SPEC to search")
    dims = [space_.parse_dimension(item) for item in space]
    if len({d.key for d in dims}) < len(dims):
        raise t.TuneError("--space", "a key is given twice")
    base = list(set_)
    try:
        profile = load_profile(target, base)
        resolved = resolve_init_from(profile, target, home_dir)  # a run's name -> its checkpoint file
    except ProfileError as err:
        raise t.TuneError("--set", str(err)) from None
    if resolved is not profile:  # every trial fine-tunes the same weights, recorded in the study
        base.append(space_.override("method.init_from", resolved.method.init_from))
    name = study or f"{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if not t.NAME.match(name):
        raise t.TuneError("--study", f"{name!r}: letters, digits, '.', '_' and '-' (64 at most)")
    space_.check_space(target, base, dims)
    req = t.Request(home=home_dir, study=name, profile_path=str(Path(target).resolve()), space=dims,
                    base=base, trials=trials, objective=space_.parse_objective(objective, home_dir),
                    parallel=parallel, pruner=pruner, seed=seed, gpus=gpus, slurm=slurm,
                    prune_after=t.prune_after(profile.train))
    t.sampler_and_pruner(seed, pruner)  # a bad --pruner, before the study exists
    st = t.create(req, unique=study is None)  # a name made here: the next free one if another took it
    name = req.study
    where = f"as Slurm jobs ({t.Request.slurm_text(slurm)})" if slurm else "through the local queue"
    say(f"study {name}: {trials} trials of {target} {where}, objective {req.objective.label()}, "
        f"{home_dir / t.STUDIES / (name + '.journal')}")
    return st, req
