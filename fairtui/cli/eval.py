"""`fairtui eval RUN`: evaluate a run's checkpoint under named attacks, per class."""

from __future__ import annotations

from typing import List, Optional

import typer

from engine.contract.attacks import known
from fairtui.cli.options import Gpus, Home, HomeT, Json, fail, resolve_run

HELP = (f"Evaluate a checkpoint under named attacks ({known()}); "
        "results are appended to the run and reused unless --force.")


def evaluate(
    run_refs: List[str] = typer.Argument(None, metavar="RUN...", help="run ids, unique id prefixes, or names "
                                         "(several: evaluated one after the other)"),
    tag: List[str] = typer.Option([], "--tag", help="also every finished or imported run with this tag "
                                  "(repeatable): a fairness report over many models"),
    attack: List[str] = typer.Option([], "--attack", help="attack names, comma-separated or repeated "
                                     "(default: the profile's eval.attacks)"),
    checkpoint: str = typer.Option("best", "--checkpoint", help="best, last, ema or fawa"),
    split: str = typer.Option("test", "--split", help="test or val"),
    n_per_class: int = typer.Option(0, "--n-per-class", min=0, help="a class-balanced subset of N per class"),
    batch_size: int = typer.Option(0, "--batch-size", min=0, help="default: the profile's eval batch size"),
    eps: Optional[str] = typer.Option(None, "--eps", help="override the eps, e.g. 8/255"),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="the seed of the attacks' random draws "
                                       "(default: the run's; part of the result's identity)"),
    force: bool = typer.Option(False, "--force", help="recompute results already stored"),
    allow_running: bool = typer.Option(False, "--allow-running",
                                       help="evaluate the last checkpoint of a run that is still training"),
    gpus: Optional[str] = Gpus,
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json

    from engine.contract import EvalRequest, RequestError
    from engine.contract.profile_schema import ProfileError, parse_fraction
    from fairtui.runs.home import RunNotFound, resolve_home
    from fairtui.launch.launcher import GpuChoice

    try:
        home_dir = resolve_home(home)
        run_dirs = [resolve_run(home, ref) for ref in run_refs or []]  # a shared name: the newest, said
        choice = GpuChoice.from_option(gpus)
    except (RunNotFound, ProfileError) as err:
        raise fail(str(err)) from None
    if tag:
        from fairtui.runs.runfolder import DONE_STATUSES
        from fairtui.runs.store import RunIndex

        run_dirs += [home_dir / "runs" / d["run_id"] for d in RunIndex(home_dir).read()
                     if set(tag) & set(d.get("tags") or []) and d.get("status") in DONE_STATUSES]
    run_dirs = list(dict.fromkeys(run_dirs))  # each run once, in the order given
    if not run_dirs:
        raise fail("name the runs to evaluate (RUN..., or --tag TAG)")
    try:
        eps_value = parse_fraction(eps) if eps is not None else None
    except ValueError as err:
        raise fail(f"--eps: {err}") from None
    names = [a.strip() for item in attack for a in item.split(",") if a.strip()]
    try:  # the request's rules are engine.contract's; a run's norm bounds eps further (its engine says so)
        request = EvalRequest(attacks=tuple(names), checkpoint=checkpoint, split=split, n_per_class=n_per_class,
                              batch_size=batch_size, eps=eps_value, seed=seed, force=force).to_json()
    except RequestError as err:
        option = {"attacks": "attack", "n_per_class": "n-per-class", "batch_size": "batch-size"}.get(err.field,
                                                                                                   err.field)
        raise fail(f"--{option}: {err}") from None
    if len(run_dirs) == 1:
        raise typer.Exit(_evaluate_one(run_dirs[0], dict(request), choice, json_out, allow_running))
    import contextlib
    import io

    docs, worst = [], 0
    for run_dir in run_dirs:
        typer.echo(f"== {run_dir.name}", err=True)
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured) if json_out else contextlib.nullcontext():
            try:
                code = _evaluate_one(run_dir, dict(request), choice, json_out, allow_running)
            except typer.Exit as stop:  # a run that cannot be evaluated (still training): report, go on
                code = stop.exit_code
        if json_out:
            text = captured.getvalue().strip()
            docs.append(json.loads(text) if text else {"run_id": run_dir.name, "exit_code": code, "results": []})
        worst = code if code and not worst else worst
    if json_out:
        typer.echo(json.dumps({"runs": docs}))
    raise typer.Exit(worst)


def _evaluate_one(run_dir, request: dict, choice, json_out: bool, allow_running: bool) -> int:
    import json

    from fairtui.launch.follow import follow
    from fairtui.launch.launcher import start_engine
    from fairtui.runs.runfolder import RunView

    view = RunView.load(run_dir)
    if view.status() == "running":
        if not allow_running:
            raise fail(f"run {run_dir.name} is still training; --allow-running evaluates its last checkpoint")
        request["checkpoint"] = "last"
    if (view.imported or {}).get("kind") == "torchscript":
        typer.echo(f"run {run_dir.name}: its model is TorchScript, imported with --trust-code: evaluating it runs "
                   "its code", err=True)
    import time

    from engine.contract.protocol import engine_command

    command = engine_command("eval", run_dir, "--request", json.dumps(request))
    started = time.time()  # progress.json written before this is an earlier phase's, never shown as this one's
    proc = start_engine(run_dir, choice, command=command)
    from engine.contract.profile_io import load_profile

    request["attacks"] = request["attacks"] or list(load_profile(run_dir / "profile.toml").eval.attacks)
    code = follow(run_dir, proc, json_out, eval_request=request, since=started)
    if code in (1, 2):  # the engine's one-line reason (a bad request; non-finite logits), as it recorded it
        from engine.contract.protocol import read_failure

        reason = read_failure(run_dir, "eval", since=started)
        if reason:
            typer.echo(reason, err=True)
    return code
