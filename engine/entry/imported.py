"""Models fairtui did not train, imported once as a run and then evaluated like any other.

`python -m engine import RUN_DIR --request JSON` reads the model named by the request, checks it
against the run's data set, and writes the run folder's checkpoints and events (`run_started` with
an `imported` record, then `run_finished` "completed"). Nothing read from a state_dict or a
RobustBench weight file runs code; a TorchScript file is a program and runs its code when loaded:
- a **state_dict** for one of fairtui's architectures is read with ``weights_only=True``;
- a **TorchScript** file is read with ``torch.jit.load`` and copied into the run folder
  (``imported/model.ts``), which holds its architecture from then on. A scripted module can call
  ``torch.save`` or write files with ``torch.from_file`` while it loads and in ``forward``, so it is
  loaded only when the run's ``[source]`` says ``trusted = true`` (``fairtui import --trust-code``);
- a **RobustBench** entry takes its architecture from the ``robustbench`` package's model zoo and
  its weights from ``<model_dir>/<dataset>/<threat>/<name>.pt``, read by fairtui with
  ``weights_only=True`` (RobustBench's own loader would download a missing file and unpickle it).
Every imported network sits behind fairtui's normalisation layer (``model.mean`` / ``model.std``;
mean 0 and std 1 for a model that takes [0, 1] pixels), so attacks work in [0, 1] as for trained runs.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine.runtime.checkpoint import sha256_of
from engine.contract.config import Profile
from engine.contract.imported import too_large

log = logging.getLogger("engine")

TS_FILE = Path("imported") / "model.ts"


class ImportFailed(ValueError):
    """The model cannot be imported as asked: exit 2 with a message naming the mismatch."""


# -- state_dicts ------------------------------------------------------------------------------------------

def _strip(state: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state.items()}


def read_weights_file(path: Path) -> dict:
    """The file's contents as ``weights_only`` loading reads them (no code runs), refused when too large or
    unreadable."""
    from engine.runtime.checkpoint import CheckpointError, load_checkpoint

    refusal = too_large(path)
    if refusal:
        raise ImportFailed(refusal)
    try:
        return load_checkpoint(path, need=())
    except CheckpointError as err:
        raise ImportFailed(str(err)) from None


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """A file's tensors as a flat state_dict: the file itself, or its ``state_dict`` / ``model`` /
    ``net`` entry (common checkpoint layouts), with DataParallel's ``module.`` prefix removed."""
    state = read_weights_file(path)
    for key in ("state_dict", "model", "net", "model_state_dict"):
        if isinstance(state.get(key), dict):
            state = state[key]
            break
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise ImportFailed(f"{path}: holds no tensors (expected a state_dict: parameter name -> tensor)")
    return _strip(tensors, "module.")


def from_layer_layout(state: dict[str, torch.Tensor], arch: str) -> dict[str, torch.Tensor]:
    """The common ``layer1.0.conv1.weight`` layout of (PreAct)ResNet-18 (the CFA, FRL and WAT authors'
    code, torchvision-style names) in fairtui's names: its eight blocks are ``layers.0`` to ``layers.7``;
    PreAct-ResNet's final BatchNorm ``bn`` is ``bn1`` and a block's projection ``shortcut.0`` is ``shortcut``.
    Keys of any other layout pass through unchanged (and a strict load then names what does not fit)."""
    import re

    if arch not in ("preact_resnet18", "resnet18") or not any(k.startswith("layer1.") for k in state):
        return state
    out = {}
    for key, value in state.items():
        match = re.match(r"layer([1-4])\.([01])\.(.*)", key)
        if match:
            block, rest = 2 * (int(match.group(1)) - 1) + int(match.group(2)), match.group(3)
            if arch == "preact_resnet18":
                rest = re.sub(r"^shortcut\.0\.", "shortcut.", rest)
            key = f"layers.{block}.{rest}"
        elif arch == "preact_resnet18" and key.startswith("bn."):
            key = "bn1." + key[len("bn."):]
        out[key] = value
    return out


def load_strict(module: nn.Module, state: dict[str, torch.Tensor], what: str, num_classes: int) -> None:
    """``load_state_dict(strict=True)`` with a message that names the mismatch."""
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [(k, tuple(state[k].shape), tuple(own[k].shape)) for k in own
              if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if not (missing or unexpected or shapes):
        module.load_state_dict(state)
        return
    parts = []
    # a classifier of another size: say it in classes
    classifier = next(((k, g) for k, g, w in shapes if len(w) in (1, 2) and g[1:] == w[1:] and w[0] == num_classes),
                      None)
    if classifier:
        parts.append(f"{num_classes} classes expected, {classifier[1][0]} given ({classifier[0]}: "
                     f"{list(classifier[1])})")
    if missing:
        parts.append(f"missing keys ({len(missing)}): {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}")
    if unexpected:
        parts.append(f"unexpected keys ({len(unexpected)}): {', '.join(unexpected[:6])}"
                     f"{' ...' if len(unexpected) > 6 else ''}")
    other = [s for s in shapes if not classifier or s[0] != classifier[0]]
    if other:
        parts.append("shape mismatches: " + ", ".join(f"{k} {list(g)} (expected {list(w)})" for k, g, w in other[:4]))
    raise ImportFailed(f"the weights do not fit {what}: " + "; ".join(parts))


# -- the three sources ------------------------------------------------------------------------------------

def fairtui_model(profile: Profile, input_shape: tuple[int, ...], num_classes: int, mean, std) -> nn.Sequential:
    from engine.models import build_model

    return build_model(profile.model, input_shape, num_classes, mean, std)


def wrap(net: nn.Module, profile: Profile, channels: int) -> nn.Sequential:
    """fairtui's normalisation layer in front of an imported network (identity unless stated)."""
    from engine.models import Normalize

    mean = profile.model.mean or (0.0,) * channels
    std = profile.model.std or (1.0,) * channels
    return nn.Sequential(Normalize(tuple(mean), tuple(std)), net)


def robustbench_entry(name: str, dataset: str, threat: str) -> dict:
    """The model-zoo entry of the `robustbench` package (its architecture and download id)."""
    import warnings

    try:
        import pyautoattack

        # robustbench 1.1 imports the module `autoattack`, which the `pyautoattack` package it
        # requires installs as `pyautoattack`: give it the same module under the name it uses.
        sys.modules.setdefault("autoattack", pyautoattack)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from robustbench.model_zoo import model_dicts
            from robustbench.model_zoo.enums import BenchmarkDataset, ThreatModel
    except ImportError as err:
        raise ImportFailed(f"the robustbench package is not installed ({err}); install it with "
                           "pip install 'fairtui[robustbench]'") from None
    try:
        zoo = model_dicts[BenchmarkDataset(dataset)][ThreatModel(threat)]
    except (ValueError, KeyError):
        raise ImportFailed(f"RobustBench has no {dataset} / {threat} leaderboard") from None
    if name not in zoo:
        import difflib

        close = difflib.get_close_matches(name, list(zoo), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ImportFailed(f"RobustBench has no {dataset} {threat} model {name!r}{hint}")
    entry = zoo[name]
    if isinstance(entry.get("gdrive_id"), list):
        raise ImportFailed(f"RobustBench's {name!r} is an ensemble of several weight files; fairtui imports "
                           "single models only")
    return entry


def robustbench_state(path: Path, name: str) -> dict[str, torch.Tensor]:
    """The zoo file's weights, read as RobustBench's load_model reads them (without unpickling code)."""
    state = read_weights_file(path)
    if "Kireev2021Effectiveness" in name or name == "Andriushchenko2020Understanding":
        state = state["last"]  # RobustBench takes the last of 'last' / 'best'
    if isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    return _strip(_strip({k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, "module."), "model.")


def check_trusted_file(path: Path, recorded: str) -> None:
    """Trust is given to a file, not to a name: a TorchScript file is loaded only while its SHA-256 is the
    one recorded when it was imported with --trust-code (a file replaced since is a new program)."""
    try:
        actual = sha256_of(path)
    except OSError as err:
        raise ImportFailed(f"{path}: cannot be read ({err.strerror or err})") from None
    if not recorded:
        raise ImportFailed(f"{path}: no SHA-256 was recorded when it was trusted, so it cannot be checked; import "
                           "it again with --trust-code if you trust its source")
    if actual != recorded:
        raise ImportFailed(f"{path} is not the file trusted at import (SHA-256 {actual[:12]}..., trusted "
                           f"{recorded[:12]}...): it was replaced, and is not loaded; import it again with "
                           "--trust-code if you trust the new file")


def build(profile: Profile, input_shape: tuple[int, ...], num_classes: int, data_mean, data_std,
          run_dir: Path) -> nn.Sequential:
    """The network of a run (trained or imported), with its normalisation layer, untrained weights."""
    arch = profile.model.arch
    if arch == "torchscript":
        if profile.source is None or not profile.source.trusted:
            raise ImportFailed("this run's model is TorchScript, a program that runs its own code when loaded, and "
                               "was not imported with --trust-code: import it again with --trust-code if you trust "
                               "its source")
        check_trusted_file(run_dir / TS_FILE, profile.source.sha256)
        try:
            net = torch.jit.load(str(run_dir / TS_FILE), map_location="cpu")
        except (RuntimeError, OSError, ValueError) as err:
            raise ImportFailed(f"not a readable TorchScript file: {str(err).splitlines()[0][:200]}") from None
        return wrap(net, profile, input_shape[0])
    if arch == "robustbench":
        src = profile.source
        return wrap(robustbench_entry(src.robustbench_name, profile.data.dataset, src.threat)["model"](), profile,
                    input_shape[0])
    return fairtui_model(profile, input_shape, num_classes, data_mean, data_std)


def check_finite(weights: nn.Module | dict) -> None:
    """Refuse weights with NaN or inf (a model, or a state_dict as read): such a model predicts one class for
    everything, which per-class evaluation would report as that class at 100% clean and robust accuracy."""
    state = weights.state_dict() if isinstance(weights, nn.Module) else weights
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not torch.isfinite(tensor).all():
            bad = int((~torch.isfinite(tensor)).sum())
            raise ImportFailed(f"tensor {name!r} has {bad} non-finite value(s) (NaN or inf) of {tensor.numel()}; "
                               "such weights give no meaningful prediction")


def check_outputs(model: nn.Module, input_shape: tuple[int, ...], num_classes: int) -> None:
    check_finite(model)
    model.eval()
    with torch.no_grad():
        try:
            out = model(torch.zeros(2, *input_shape))
        except Exception as err:  # noqa: BLE001 - any failure of a foreign model is the user's to fix
            raise ImportFailed(f"the model fails on a batch of {list(input_shape)} images: "
                               f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[1] != num_classes:
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ImportFailed(f"the model gives outputs of shape {shape} for 2 images; {num_classes} classes expected")
    if not torch.isfinite(out).all():
        raise ImportFailed("the model gives non-finite outputs (NaN or inf) for a batch of blank images")


# -- the command ------------------------------------------------------------------------------------------

def import_run(run_dir: Path, request: dict) -> int:
    """Import the model of ``request`` into the (new) run folder ``run_dir``."""
    from engine.contract.profile_io import load_profile
    from engine.training.process import EXIT_OK, EXIT_USAGE, report_failure, setup_logging

    setup_logging()
    profile = load_profile(run_dir / "profile.toml")
    try:
        imported = _import(run_dir, profile, request)
    except ImportFailed as err:
        return report_failure(run_dir, "import", str(err), EXIT_USAGE)
    log.info("imported %s", imported)
    return EXIT_OK


def _import(run_dir: Path, profile: Profile, request: dict) -> dict:
    from engine.runtime.checkpoint import CheckpointStore
    from engine.data import load_splits
    from engine.contract.events import EventWriter
    from engine.runtime.provenance import provenance
    from engine.runtime.checkpoint import atomic_torch_save

    splits = load_splits(profile.data, profile.seed)
    src = profile.source
    model = build_for_import(profile, request, splits, run_dir)
    check_outputs(model, splits.input_shape, splits.num_classes)
    record = {"kind": src.kind, "path": src.path, "sha256": src.sha256, "arch": profile.model.arch,
              "robustbench_name": src.robustbench_name or None, "threat": src.threat or None,
              "mean": list(profile.model.mean), "std": list(profile.model.std)}
    state = {"epoch": 0, "model": model.state_dict(), "profile": profile.to_table(), "optimizer": {}, "rng": {},
             "imported": record}
    store = CheckpointStore(run_dir / "checkpoints")
    atomic_torch_save({"epoch": 0, "model": state["model"], "best": None, "profile": state["profile"]},
                      store.best_path)
    atomic_torch_save(state, store.last_path)
    store.write_names(state)
    events = EventWriter(run_dir / "events.jsonl", run_dir.name)
    try:
        events.emit("run_started", config=profile.to_table(), num_classes=splits.num_classes,
                    class_names=splits.class_names, device="cpu (imported, not trained)", seed=profile.seed,
                    split_sizes=splits.sizes(), provenance=provenance(), imported=record)
        events.emit("run_finished", status="completed")
    finally:
        events.close()
    return record


def build_for_import(profile: Profile, request: dict, splits, run_dir: Path) -> nn.Sequential:
    src, k = profile.source, splits.num_classes
    if src.kind == "torchscript":
        target = run_dir / TS_FILE
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(src.path, target)
        return build(profile, splits.input_shape, k, splits.mean, splits.std, run_dir)
    if src.kind == "robustbench":
        entry = robustbench_entry(src.robustbench_name, profile.data.dataset, src.threat)
        path = Path(src.path)
        if not path.is_file():
            raise ImportFailed(
                f"RobustBench's weights for {src.robustbench_name!r} are not at {path} (fairtui never downloads). "
                f"Where the network reaches, run: python -c \"from robustbench.utils import load_model; "
                f"load_model('{src.robustbench_name}', model_dir='models', dataset='{profile.data.dataset}', "
                f"threat_model='{src.threat}')\" and copy models/{profile.data.dataset}/{src.threat}/"
                f"{src.robustbench_name}.pt to {path}")
        net = entry["model"]()
        load_strict(net, robustbench_state(path, src.robustbench_name), f"RobustBench's {src.robustbench_name}", k)
        return wrap(net, profile, splits.input_shape[0])
    # a state_dict for one of fairtui's architectures: the network alone, or a whole fairtui model
    state = read_state_dict(Path(src.path))
    check_finite(state)  # named as in the file
    model = fairtui_model(profile, splits.input_shape, k, splits.mean, splits.std)
    if any(key.startswith("1.") for key in state) and any(key.startswith("0.") for key in state):
        load_strict(model, state, f"fairtui's {profile.model.arch}", k)  # a fairtui model, normalisation included
        if profile.model.mean:
            model[0].mean.copy_(torch.tensor(profile.model.mean))
            model[0].std.copy_(torch.tensor(profile.model.std))
    else:
        if not profile.model.mean:
            raise ImportFailed("this state_dict has no normalisation layer: say what the model expects with "
                               "--mean and --std, or --no-normalize for a model that takes [0, 1] pixels")
        load_strict(model[1], from_layer_layout(state, profile.model.arch), f"fairtui's {profile.model.arch}", k)
    return model


__all__ = ["ImportFailed", "TS_FILE", "build", "import_run"]
