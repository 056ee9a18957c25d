"""Which runs are seeds of one configuration: the grouping of `export`, `plot`, `compare --by profile` and the app's
group view.

Runs of one profile (its ``name``) are one configuration when their resolved profiles agree on every key, up to
the seed, the name and description, the keys that only mirror numbers elsewhere (a dashboard), and two kinds of
difference that do not change what was trained:

- a key one run's engine did not record (a fairtui version before the key existed): the key is compared only
  among the runs that recorded it, so a profile's seeds trained before and after a release stay one row;
- the runtime *requested* (``train.amp``, ``train.channels_last``, ``train.compile``, ``train.device``): the
  runtime that *ran*, as the run's ``run_started`` describes it (autocast, channels-last, compiled), is compared
  instead, so "auto" and "none" on a CPU where both ran fp32 are one configuration, and bf16 is not fp32;
- the thread count (``train.threads``): like the machine, it changes only how reductions are split, so one-thread
  seeds trained side by side (`fairtui judge`, sweeps on the CPU's slots) join the all-core seeds of their profile;
  the provenance warnings name seeds of one configuration trained with other threads.

A fine-tune's ``method.init_from`` names its own seed's base run, so it counts as the base run's profile, not its
path. A base whose folder is not at hand (committed files from another machine) is "a run"; where the profile's
other fine-tunes name one base profile, it is taken for that one, so whether a base happens to be on this machine
does not split a profile's seeds (where they name several, "a run" is a group of its own). A profile whose runs
form several configurations gives each its own group, labelled by what tells it apart:
``cifar10-cpu-cfa-trades (train.lr=0.1625, train.weight_decay=7.69e-05)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.contract.protocol import RUNTIME_FP32
from fairtui.runs.runfolder import RunView

# Where a run's numbers are also sent (a dashboard): they do not change the numbers.
MIRROR_KEYS = ("train.log_to", "train.wandb_project", "train.wandb_entity", "train.wandb_mode")
# What a run asked of its runtime; what it got is in its run_started's device (RUNTIME)
RUNTIME_REQUEST_KEYS = ("train.amp", "train.channels_last", "train.compile", "train.device")
RUNTIME = "runtime"
IGNORED = ("seed", "name", "description", "train.threads", *MIRROR_KEYS, *RUNTIME_REQUEST_KEYS)
# Keys that older engines did not record, where what they trained with is known: TRADES had one form (two
# forwards) before `method.form` existed, so a code-form run is never taken for a seed of those runs.
UNRECORDED_DEFAULTS = {"method.form": ("trades", "paper")}
LABEL_KEYS = 3  # the differing keys a label names, unless two configurations need more to be told apart


def flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def profile_name(view: RunView) -> str:
    """The profile a run was made from: its resolved profile's ``name``, else its profile file's stem."""
    name = view.config.get("name")
    if name:
        return str(name)
    path = view.meta.get("profile_path") or ""
    return Path(path).stem or view.name


def runtime_ran(view: RunView) -> str:
    """The runtime options the run trained with (:func:`session_runtime` of its run_started)."""
    return session_runtime(view.started or {})


def session_runtime(event: dict) -> str:
    """The runtime options a run_started or run_resumed trained with: its ``runtime`` ("autocast bfloat16,
    channels-last"; "fp32" for plain fp32 eager). Events of engines before that field are read from the device
    text ("cpu; autocast bfloat16, channels-last" -> "autocast bfloat16, channels-last"), where a CUDA device
    names its GPU and CUDA_VISIBLE_DEVICES in parentheses ("cuda (NVIDIA H200; CUDA_VISIBLE_DEVICES=1);
    autocast ..."): which GPU ran is not a setting, so the parenthesis is not part of the options."""
    if isinstance(event.get("runtime"), str) and event["runtime"]:
        return event["runtime"]
    device = str(event.get("device") or "")
    if device.startswith("cuda (") and ")" in device:
        device = "cuda" + device[device.index(")") + 1:]
    _, sep, options = device.partition("; ")
    return options if sep and options else RUNTIME_FP32


def device_kind(event: dict) -> str | None:
    """The kind of device a run_started or run_resumed ran on, "cpu" or "cuda" (None where it did not say)."""
    device = str(event.get("device") or "")
    return device.split(";")[0].split(" ")[0] or None


def configuration(view: RunView) -> dict[str, Any]:
    """The run's resolved profile as the grouping compares it (see the module's docstring)."""
    flat = {k: v for k, v in flatten(view.config).items() if k not in IGNORED}
    for key, (method, before) in UNRECORDED_DEFAULTS.items():  # what an engine before the key trained with
        if flat.get("method.name") == method:
            flat.setdefault(key, before)
    for key in STARTS:  # a fine-tune's base and a distillation's teacher: a run of a profile, up to its seed
        if flat.get(key):
            flat[key] = base_profile(str(flat[key]))
    flat[RUNTIME] = runtime_ran(view)
    return flat


UNKNOWN_BASE = "a run"
INIT = "method.init_from"
STARTS = (INIT, "method.teacher")
_BASE_NAMES: dict[str, str] = {}  # ref -> its run's profile name: a run folder's profile.toml never changes


def base_profile(ref: str) -> str:
    """A fine-tune's base, up to its seed: "a run of PROFILE" where the run folder that ``ref`` names (the
    folder, or a checkpoint inside it) holds its profile; "a run" where it is not at hand (committed files
    copied from another machine). Only a profile found is remembered: a base not at hand is looked for again
    (the app runs for days; the base's folder may arrive, with a copy or a sync, after a first look)."""
    name = _BASE_NAMES.get(ref)
    if name is None:
        path = Path(ref)
        folder = path.parent.parent if path.parent.name == "checkpoints" else path
        try:
            from engine.contract.profile_io import read_toml

            name = read_toml(folder / "profile.toml").get("name")
        except Exception:  # gone, unreadable or not a profile: the base is some run
            return UNKNOWN_BASE
        if not name:
            return UNKNOWN_BASE
        if len(_BASE_NAMES) < 4096:
            _BASE_NAMES[ref] = name
    return f"a run of {name}"


def by_configuration(views: list[RunView]) -> list[tuple[str, list[RunView]]]:
    """The runs as (label, runs) per configuration, in the order of each one's first run: a profile of one
    configuration is labelled by its name, one of several by its name and what tells each apart."""
    profiles: dict[str, list[RunView]] = {}
    for view in views:
        profiles.setdefault(profile_name(view), []).append(view)
    out = []
    for name, members in profiles.items():
        confs = [configuration(v) for v in members]
        for key in STARTS:
            known = {c.get(key) for c in confs} - {None, "", UNKNOWN_BASE}
            if len(known) == 1:  # bases not at hand here are taken for the one base profile the others name
                for c in confs:
                    if c.get(key) == UNKNOWN_BASE:
                        c[key] = next(iter(known))
        common = set.intersection(*(set(c) for c in confs))  # keys every run recorded
        split: dict[str, list[int]] = {}
        for i, conf in enumerate(confs):
            split.setdefault(repr(sorted((k, repr(conf[k])) for k in common)), []).append(i)
        if len(split) == 1:
            out.append((name, members))
            continue
        firsts = [confs[idx[0]] for idx in split.values()]
        differ = [k for k in sorted(common) if len({repr(c[k]) for c in firsts}) > 1]
        shown = LABEL_KEYS  # more, where the first few keys do not tell two configurations apart
        while len({repr([c[k] for k in differ[:shown]]) for c in firsts}) < len(firsts):
            shown += 1
        for conf, idx in zip(firsts, split.values()):
            more = ", ..." if len(differ) > shown else ""
            out.append((f"{name} ({', '.join(f'{k}={conf[k]}' for k in differ[:shown])}{more})",
                        [members[i] for i in idx]))
    order = {id(v): i for i, v in enumerate(views)}
    return sorted(out, key=lambda group: min(order[id(v)] for v in group[1]))


def seed_key(view: RunView) -> int | None:
    seed = view.config.get("seed")
    return int(seed) if isinstance(seed, int) or (isinstance(seed, str) and seed.isdigit()) else None


def first_of_each_seed(view: RunView) -> tuple:
    """The one order in which a configuration's runs claim their seeds: by seed, then the oldest first. Runs of one
    configuration and one seed are replicates, not seeds: the first one to claim the seed is the group's, every
    other is set aside and named (`compare`, `export`, `plot` and the app alike)."""
    seed = seed_key(view)
    return (seed is None, seed or 0, view.meta.get("created", 0))


def replicates_apart(views: list[RunView]) -> tuple[list[RunView], list[str]]:
    """One run per seed of ``views`` (one configuration), in :func:`first_of_each_seed`'s order, and a line for
    each replicate set aside ("NAME [ID]: a second run of seed N"). Runs without a seed are all kept."""
    kept: list[RunView] = []
    aside: list[str] = []
    seen: set[int] = set()
    for view in sorted(views, key=first_of_each_seed):
        seed = seed_key(view)
        if seed is not None and seed in seen:
            aside.append(f"{view.name} [{view.run_id}]: a second run of seed {seed}")
            continue
        if seed is not None:
            seen.add(seed)
        kept.append(view)
    return kept, aside


def shipped_group(label: str, groups: dict[str, list[RunView]], profiles: Path = Path("profiles")) -> str | None:
    """Where a profile's runs are labelled apart by what they change ("NAME (method.dafa_lambda=1.0)" beside
    "NAME (method.dafa_lambda=2.0)"), the one group whose changed keys hold the values of the shipped
    ``profiles/NAME.toml``; None where there is no such profile, or not exactly one group matches it."""
    import re

    candidates = [name for name in groups if name.startswith(label + " (") and groups[name]]
    path = profiles / f"{label}.toml"
    if not candidates or not path.is_file():
        return None
    try:
        from engine.contract.profile_io import load_profile

        shipped = {k: v for k, v in flatten(load_profile(path).to_table()).items() if k not in IGNORED}
    except Exception:  # a profile that does not load names no group
        return None
    matches = []
    for name in candidates:
        keys = re.findall(r"(?:\(|, )([\w.]+)=", name[len(label):])
        conf = configuration(groups[name][0])
        if keys and all(k in shipped and repr(conf.get(k)) == repr(shipped[k]) for k in keys):
            matches.append(name)
    return matches[0] if len(matches) == 1 else None
