"""`fairtui import`: a model fairtui did not train becomes a run (status `imported`) to evaluate and compare."""

from __future__ import annotations

import contextlib
from typing import Any, List, Optional

import typer

from fairtui.cli.options import Home, HomeT, Json, fail

HELP = ("Import a model trained elsewhere as a run: a state_dict for one of fairtui's architectures, a "
        "TorchScript file, or a RobustBench zoo entry. Then `fairtui eval RUN --attack aa` evaluates it per class.")

CHANNELS = {"digits": 1, "mnist": 1, "fashion_mnist": 1}  # every other image data set: 3


# The eps an import records when --eps is not given: the data set's usual threat model, and why.
USUAL_EPS: dict[tuple[str, str], tuple[float, str]] = {
    **{("Linf", d): (8 / 255, "the usual 8/255 for " + d) for d in ("cifar10", "cifar100", "svhn", "stl10",
                                                                     "tiny_imagenet")},
    ("Linf", "mnist"): (0.3, "the usual 0.3 for mnist (Madry et al.)"),
    ("Linf", "fashion_mnist"): (0.1, "the usual 0.1 for fashion_mnist"),
    ("Linf", "digits"): (0.2, "fairtui's digits profiles' 0.2"),
    **{("L2", d): (0.5, "RobustBench's L2 0.5 for " + d) for d in ("cifar10", "cifar100")},
}


def usual_eps(dataset: str, threat: str) -> tuple[float, str]:
    if (threat, dataset) not in USUAL_EPS:
        raise ValueError(f"no usual {threat} eps for {dataset}: give the model's own with --eps")
    return USUAL_EPS[(threat, dataset)]


def _floats(text: str, option: str) -> list[float]:
    import math

    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise fail(f"{option}: expected comma-separated numbers like 0.4914,0.4822,0.4465, got {text!r}") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise fail(f"{option}: expected finite numbers, got {text!r}")
    return values


CHECK_TIMEOUT_S = 300.0


class _Terminated(Exception):
    """SIGTERM during the check: handled like Ctrl-C."""


def check_in_engine(run_dir, timeout: float) -> int:
    """Start `python -m engine import RUN` (read, load and check the model, on the CPU) through the launcher
    like `run` and `eval` (its own session, output in the run's engine.log) and wait at most ``timeout``
    seconds; its exit code. A model that never returns (TorchScript can loop), Ctrl-C or SIGTERM kill the
    check's whole process group and remove the run folder: nothing is left half-made."""
    import os
    import shutil
    import signal
    import subprocess

    from fairtui.launch.launcher import GpuChoice, start_engine

    from engine.contract.protocol import engine_command

    # A signal that lands while start_engine is inside Popen (the check already started, its pid not yet
    # ours) must not leave the check running in its session of its own: until `proc` is set, Ctrl-C and
    # SIGTERM are only noted, and acted on as soon as it is.
    pending: list[BaseException] = []
    proc = None

    def interrupted(why: BaseException):
        def handler(signum, frame):
            if proc is None:
                pending.append(why)
                return
            raise why

        return handler

    previous = (signal.signal(signal.SIGTERM, interrupted(_Terminated())),
                signal.signal(signal.SIGINT, interrupted(KeyboardInterrupt())))
    try:
        proc = start_engine(run_dir, GpuChoice(cpu=True), command=engine_command("import", run_dir))
        if pending:
            raise pending[0]
        return proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt, _Terminated) as why:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(why, subprocess.TimeoutExpired):
            typer.echo(f"fairtui import: the model's check did not finish in {timeout:g} s (a model that never "
                       "returns?); nothing was imported (--check-timeout allows more)", err=True)
            raise typer.Exit(1) from None
        typer.echo("fairtui import: interrupted; nothing was imported", err=True)
        raise typer.Exit(130 if isinstance(why, KeyboardInterrupt) else 143) from None
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


def import_model(
    state_dict: Optional[str] = typer.Option(None, "--state-dict", help="a state_dict file for --arch"),
    torchscript: Optional[str] = typer.Option(None, "--torchscript", help="a TorchScript file (torch.jit.save)"),
    robustbench: Optional[str] = typer.Option(None, "--robustbench", help="a RobustBench model name, e.g. "
                                              "Carmon2019Unlabeled (needs fairtui[robustbench])"),
    dataset: str = typer.Option(..., "--dataset", help="the data set the model classifies (cifar10, ...)"),
    arch: Optional[str] = typer.Option(None, "--arch", help="fairtui's architecture of a --state-dict "
                                       "(preact_resnet18, resnet18, wide_resnet, small_cnn, mlp)"),
    depth: int = typer.Option(34, "--depth", min=1, help="WideResNet depth"),
    width: int = typer.Option(10, "--width", min=1, help="WideResNet widen factor"),
    threat: str = typer.Option("linf", "--threat", help="RobustBench threat model and the eval norm: linf or l2"),
    model_dir: str = typer.Option("models", "--model-dir", help="RobustBench's model folder: weights are read "
                                  "from MODEL_DIR/DATASET/THREAT/NAME.pt, never downloaded"),
    mean: Optional[str] = typer.Option(None, "--mean", help="the normalisation the model expects, per channel"),
    std: Optional[str] = typer.Option(None, "--std", help="(with --mean)"),
    no_normalize: bool = typer.Option(False, "--no-normalize", help="the model takes [0, 1] pixels as they are"),
    data_root: str = typer.Option("data", "--data-root", help="the folder with the data set's files"),
    eps: Optional[str] = typer.Option(None, "--eps", help="the evaluation eps (default: the data set's usual one, "
                                      "e.g. 8/255 for cifar10 linf, 0.2 for digits; said at import)"),
    trust_code: bool = typer.Option(False, "--trust-code", help="--torchscript: a TorchScript file is a program "
                                    "that runs its code when loaded and evaluated; import it only from a source "
                                    "you trust"),
    check_timeout: float = typer.Option(CHECK_TIMEOUT_S, "--check-timeout", help="seconds the model's check "
                                        "(read, load, one forward) may take before the import gives up", min=1),
    name: Optional[str] = typer.Option(None, "--name", help="a name for the run"),
    tag: List[str] = typer.Option([], "--tag", help="a tag for the run (repeatable)"),
    json_out: bool = Json,
    home: HomeT = Home,
) -> None:
    import json

    from engine.contract.config import profile_from_table
    from engine.contract.profile_schema import ProfileError, parse_fraction
    from fairtui.runs.home import resolve_home
    from fairtui.launch.launcher import create_run

    from fairtui.runs.usertext import UserTextError, check_name_and_tags

    try:
        check_name_and_tags(name, tag)
    except UserTextError as err:
        raise fail(str(err)) from None
    kind, value = _which_source(state_dict, torchscript, robustbench, trust_code, dataset, arch)
    threats = {"linf": "Linf", "l2": "L2"}
    if threat.lower() not in threats:
        raise fail(f"--threat: linf or l2, got {threat!r}")
    threat_name = threats[threat.lower()]
    norm_mean, norm_std = _normalisation(mean, std, no_normalize, dataset, kind)
    try:
        eps_value, eps_why = (parse_fraction(eps), "--eps") if eps is not None else usual_eps(dataset, threat_name)
    except ValueError as err:
        raise fail(f"--eps: {err}") from None

    path, digest = _source_file(kind, value, model_dir, dataset, threat_name)
    label = value if kind == "robustbench" else path.name
    raw = {
        "name": name or (value if kind == "robustbench" else path.stem), "seed": 0,
        "description": f"imported {kind.replace('_', ' ')}: {label}",
        "data": {"dataset": dataset, "root": data_root},
        "model": {"arch": arch if kind == "state_dict" else kind, "depth": depth, "width": width,
                  "mean": norm_mean, "std": norm_std},
        "attack": {"norm": threat_name.lower(), "eps": eps_value, "step": eps_value / 4},
        "method": {"name": "imported"},
        "eval": {"attacks": ["clean", "pgd20"], "checkpoints": ["best"]},
        "source": {"kind": kind, "path": str(path), "sha256": digest,
                   "robustbench_name": value if kind == "robustbench" else "",
                   "threat": threat_name if kind == "robustbench" else "", "trusted": kind == "torchscript"},
    }
    try:
        profile = profile_from_table(raw, "fairtui import")
        home_dir = resolve_home(home)
        run_dir = create_run(home_dir, profile, "", name or raw["name"], list(tag), None,
                             {"imported": kind, "eps_from": eps_why}, imported=True)
    except ProfileError as err:
        raise fail(str(err)) from None
    returncode = check_in_engine(run_dir, check_timeout)
    if returncode != 0:
        _refused(run_dir, returncode)
    from fairtui.runs.store import RunIndex

    RunIndex(home_dir).register(run_dir)
    typer.echo(f"evaluation eps {eps_value:.4g} ({threat_name}), from {eps_why}"
               + ("" if eps is not None else "; --eps chooses another"), err=True)
    typer.echo(f"imported {label} as run {run_dir.name} ({raw['name']}); evaluate it with "
               f"fairtui eval {run_dir.name} --attack aa", err=True)
    if json_out:
        typer.echo(json.dumps({"run_id": run_dir.name, "run_dir": str(run_dir), "status": "imported",
                               "source": raw["source"]}))


def _which_source(state_dict: str | None, torchscript: str | None, robustbench: str | None, trust_code: bool,
                  dataset: str, arch: str | None) -> tuple[str, str]:
    """The one source given (kind, value), checked with the options that go with it."""
    from engine.contract.config import ARCHS, NUM_CLASSES

    given = [(k, v) for k, v in (("state_dict", state_dict), ("torchscript", torchscript),
                                 ("robustbench", robustbench)) if v]
    if len(given) != 1:
        raise fail("give exactly one of --state-dict FILE (with --arch), --torchscript FILE, --robustbench NAME")
    kind, value = given[0]
    if kind == "torchscript" and not trust_code:
        raise fail("--torchscript: a TorchScript file is a program: loading and evaluating it runs its code (it "
                   "can write files). Add --trust-code if you trust its source; a --state-dict or a --robustbench "
                   "entry loads without running anything")
    if trust_code and kind != "torchscript":
        raise fail("--trust-code: only for --torchscript (state_dicts and RobustBench weights run no code)")
    if dataset not in NUM_CLASSES:
        raise fail(f"--dataset: unknown data set {dataset!r}; choose from {', '.join(NUM_CLASSES)}")
    if kind == "state_dict" and arch not in ARCHS:
        raise fail(f"--arch: a state_dict needs one of fairtui's architectures ({', '.join(ARCHS)}), got {arch!r}")
    if kind != "state_dict" and arch:
        raise fail(f"--arch: only for --state-dict (a {kind} model brings its own architecture)")
    return kind, value


def _normalisation(mean: str | None, std: str | None, no_normalize: bool, dataset: str,
                   kind: str) -> tuple[list[float], list[float]]:
    """The per-channel mean and std the model expects (TorchScript and RobustBench models: [0, 1] pixels)."""
    channels = CHANNELS.get(dataset, 3)
    if no_normalize and (mean or std):
        raise fail("--no-normalize: not with --mean / --std")
    norm_mean = _floats(mean, "--mean") if mean else ([0.0] * channels if no_normalize else [])
    norm_std = _floats(std, "--std") if std else ([1.0] * channels if no_normalize else [])
    if bool(mean) != bool(std):
        raise fail("--mean and --std go together")
    if norm_mean and (len(norm_mean) != channels or len(norm_std) != channels):
        raise fail(f"--mean / --std: {dataset} images have {channels} channel(s); give {channels} value(s) each")
    if kind != "state_dict" and not norm_mean:
        norm_mean, norm_std = [0.0] * channels, [1.0] * channels
    return norm_mean, norm_std


def _source_file(kind: str, value: str, model_dir: str, dataset: str, threat_name: str) -> tuple[Any, str]:
    """The model's file (a RobustBench entry's under MODEL_DIR, which may not exist yet: the engine says so)
    and its SHA-256 when it exists."""
    import hashlib
    from pathlib import Path

    from engine.contract.imported import too_large

    if kind == "robustbench":
        path = Path(model_dir).expanduser().resolve() / dataset / threat_name / f"{value}.pt"
    else:
        path = Path(value).expanduser().resolve()
        if not path.is_file():
            raise fail(f"--{kind.replace('_', '-')}: no such file: {value}")
    refusal = too_large(path)  # the engine would refuse it too, but only after the file was hashed here
    if refusal:
        raise fail(refusal)
    digest = ""
    if path.is_file():
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        digest = h.hexdigest()
    return path, digest


def _refused(run_dir: Any, returncode: int) -> None:
    """The engine's check failed: its reason (or its log's tail) on stderr, the half-made run removed, exit."""
    import shutil

    from engine.contract.protocol import read_failure

    reason = read_failure(run_dir, "import")  # the engine's one-line reason, as it recorded it
    log = (run_dir / "engine.log").read_text(errors="replace") if not reason else ""
    shutil.rmtree(run_dir, ignore_errors=True)  # nothing is left half-made
    lines = log.strip().splitlines()
    typer.echo(reason or f"fairtui import: failed (exit {returncode}):\n" + "\n".join(lines[-15:]), err=True)
    raise typer.Exit(2 if returncode == 2 else 1)
