"""Options shared by several commands."""

from __future__ import annotations

from typing import Optional

import typer

from fairtui.runs.usertext import inert

Home = typer.Option(None, "--home", help="home folder (default: $FAIRTUI_HOME, else ./.fairtui)")
Json = typer.Option(False, "--json", help="print exactly one JSON document on stdout")
Gpus = typer.Option(None, "--gpus", help="'cpu' or CUDA device indices like 0,1 (sets CUDA_VISIBLE_DEVICES)")
# Which results a table or figure shows (export, plot): the headline ones unless these say otherwise
Attack = typer.Option(None, "--attack", help="default: each run's first robust attack")
Checkpoint = typer.Option("best", "--checkpoint")
NPerClass = typer.Option(0, "--n-per-class", min=0, help="the results on N test images per class "
                         "(fairtui eval --n-per-class N); default: the whole split")
Force = typer.Option(False, "--force", help="overwrite the -o file if it exists")
Detach = typer.Option(False, "--detach", help="start the engine and return at once (it keeps training)")

HomeT = Optional[str]

# Slurm (fairtui run and fairtui sweep with --launcher slurm; fairtui.launch.slurm.SlurmSettings)
Launcher = typer.Option(None, "--launcher", help="local (default) or slurm")
Nodes = typer.Option(None, "--nodes", help="slurm: nodes for one run (DDP across them, torchrun on each)")
GpusPerNode = typer.Option(None, "--gpus-per-node", help="slurm: GPUs of each node (one rank each; 0: a CPU job)")
Partition = typer.Option(None, "--partition", help="slurm: the partition")
TimeMin = typer.Option(None, "--time", help="slurm: minutes per job (at the limit the run stops cleanly, is requeued and resumes)")
Cpus = typer.Option(None, "--cpus", help="slurm: CPUs per task (one task per node)")
MemGb = typer.Option(None, "--mem-gb", help="slurm: memory per node")
Sbatch = typer.Option([], "--sbatch", help="slurm: extra sbatch option KEY=VALUE (repeatable)")
Cluster = typer.Option(None, "--cluster", help="slurm (default), or local: submitit runs the job's tasks "
                       "on this machine, to try a launch before the cluster")


def fail(message: str, code: int = 2) -> "typer.Exit":
    typer.echo(f"fairtui: {message}", err=True)
    return typer.Exit(code)


def resolve_run(home: "str | None", ref: str, unique_name: bool = False):
    """RUN -> its folder, or exit 2 with close matches / the ambiguous candidates. A name several runs share means
    the newest, and a line on stderr says so and names the others; with ``unique_name`` (a command that cannot be
    undone: rm) it is refused instead, listing them."""
    from fairtui.runs.home import RunNotFound, find_run, named_runs, read_name, resolve_home
    from fairtui.runs.store import RunIndex

    home_dir = resolve_home(home)
    direct = home_dir / "runs" / ref
    if ref.strip() not in ("", ".", "..") and "/" not in ref and (direct / "profile.toml").exists():  # an exact id
        return direct
    try:
        names = RunIndex(home_dir).names() if (home_dir / "runs.json").exists() else None
        run_dir = find_run(home_dir, ref, names or None, unique_name=unique_name)
    except RunNotFound as err:
        raise fail(str(err)) from None
    if read_name(run_dir) != ref:  # an id, a prefix or a short id: no other run is meant
        return run_dir
    shared = named_runs(home_dir, ref, names or None)
    if len(shared) > 1 and run_dir == shared[-1]:
        others = ", ".join(p.name for p in shared[-2::-1][:5]) + (", ..." if len(shared) > 6 else "")
        typer.echo(f"fairtui: {len(shared)} runs are named {inert(ref)}: this is the newest, {run_dir.name} "
                   f"(the others: {others}; give an id for one of them)", err=True)
    return run_dir


def option_group(param: str, options):
    """A decorator that declares a group of options once: the command's ``param`` parameter becomes the options
    (``(name, type hint, typer.Option)`` triples), in its place in the help, and the command receives their values
    as one dict under ``param``. `run`, `resume` and `tune` share the Slurm options so; `export` and `plot` the
    group options."""
    import functools
    import inspect

    def decorate(command):
        signature = inspect.signature(command)
        params = list(signature.parameters.values())
        at = [p.name for p in params].index(param)
        added = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=hint)
                 for name, hint, option in options]

        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            kwargs[param] = {name: kwargs.pop(name) for name, _, _ in options}
            return command(*args, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=params[:at] + added + params[at + 1:])
        wrapper.__annotations__ = {**{k: v for k, v in command.__annotations__.items() if k != param},
                                   **{name: hint for name, hint, _ in options}}
        return wrapper

    return decorate
