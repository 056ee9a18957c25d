"""What a judgement was asked (a :class:`Request`: `fairtui judge`'s options, or the app's launch dialog) and what it
resolves to (fairtui.campaign.judgement.Spec): the method's and the baseline's profiles, the baseline's committed runs
by seed, the seeds. The request is kept in the judgement's record, so the app and the command line reopen it alike.
What cannot be judged is a ValueError (or ProfileError) naming why, before anything is created."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from fairtui.campaign.judging import Side, Spec, committed_by_seed
from fairtui.runs.runfolder import RunView


@dataclass
class Request:
    profile: str
    baseline: str
    results: list[str] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    seeds: str | None = None  # "0-4", "0,2,5"; None: the baseline's committed seeds
    until_decided: bool = False
    max_seeds: int = 10
    metric: str = "worst_robust"
    checkpoint: str = "best"
    effect: float = 0.02
    allow_protocol_difference: bool = False
    gpus: str | None = None
    # where the baseline's seeds train when its committed runs trained on another kind of CPU: "here" (the default:
    # a pair is trained on one CPU) or "committed" (pair with the committed runs across CPUs, saying so)
    baseline_cpu: str = "here"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "Request":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in doc.items() if k in known})


MAX_SEED = 2 ** 31 - 1  # a seed the engine's generators take (numpy's legacy seeding stops at 2^32 - 1)
MAX_SEEDS = 1000  # seeds one judgement may train: past that, no method needs seeds, only a smaller question


def sibling_judgements(home: Path, spec) -> list[str]:
    """A line for each other judgement in the home of the same method against the same baseline, naming what
    differs from this one (its key holds what decides a verdict: the checkpoint, the metric, the baseline's runs):
    a command that differs from a running judgement starts its own, and says so."""
    import json

    out = []
    for path in sorted((home / "judges").glob("*.json")) if (home / "judges").is_dir() else []:
        if path.stem == spec.key:
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("method") != spec.method.label \
                or record.get("baseline") != spec.baseline.label:
            continue
        asked, mine = record.get("request") or {}, spec.request
        what = [f"{k} {asked.get(k)!r} (this one: {mine.get(k)!r})" for k in ("checkpoint", "metric", "results", "seeds",
                                                                          "until_decided", "baseline_cpu")
                if asked.get(k) != mine.get(k)]
        out.append(f"another judgement of {spec.method.label} against {spec.baseline.label} exists, {path.stem}: "
                   + ("; ".join(what) or "the same request, other committed baseline runs or profile")
                   + f". This is {spec.key}, with its own record and runs")
    return out


def run_stem(name: str, overrides: list[str], method: str) -> str:
    """A judgement's runs are named with what they change, so that they never take the committed runs' names:
    'cifar10-cpu-quick-dafa' with method.dafa_lambda=2 -> 'cifar10-cpu-quick-dafa-lambda2' (the key's last part less
    the method's prefix, the value as written, at most 60 characters)."""
    import re

    parts = []
    for text in overrides:
        key, _, value = text.partition("=")
        last = key.strip().rsplit(".", 1)[-1].removeprefix(f"{method}_")
        value = value.strip().strip("\"'")
        try:
            number = float(value)
            value = f"{number:g}"
        except ValueError:
            pass
        parts.append(re.sub(r"[^A-Za-z0-9.]+", "", last.replace("_", "") + value))
    stem = "-".join([name, *[p for p in parts if p]])
    return stem[:60].rstrip("-.")


def parse_seeds(text: str) -> list[int]:
    """"0-4" -> 0..4, "0,2,5", "0-2,7"; ValueError naming the option otherwise, and for a seed above MAX_SEED or
    more than MAX_SEEDS seeds (said before any range is made, so a huge one costs no memory)."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise ValueError(f"--seeds {text!r}: write seeds as 0-4 or 0,2,5")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last > MAX_SEED:
            raise ValueError(f"--seeds {text!r}: a seed is at most {MAX_SEED}")
        if last - first + 1 + len(out) > MAX_SEEDS:
            raise ValueError(f"--seeds {text!r}: at most {MAX_SEEDS} seeds a judgement")
        out += list(range(first, last + 1))
    if not out or len(set(out)) != len(out):
        raise ValueError(f"--seeds {text!r}: no seeds, or a seed named twice")
    return out


def build_spec(request: Request, home: Path, warn: Callable[[str], None] = lambda line: None) -> Spec:
    """The judgement's sides, seeds and settings (``warn``: the lines a user should read, such as runs set aside)."""
    from engine.contract.profile_io import apply_overrides, load_profile, read_toml

    if request.until_decided and request.seeds:
        raise ValueError("give --seeds or --until-decided (seeds 0 to --max-seeds - 1, in order), not both")
    if not 2 <= request.max_seeds <= MAX_SEEDS:
        raise ValueError(f"--max-seeds {request.max_seeds}: give 2 to {MAX_SEEDS}")
    from fairtui.launch.queue import pool_of

    pool = pool_of(request.gpus)
    written = apply_overrides(read_toml(request.profile), request.overrides)
    one_thread = pool == ["cpu"] and "threads" not in (written.get("train") or {})
    try:
        method_profile = load_profile(request.profile, request.overrides + (["train.threads=1"] if one_thread else []))
    except ValueError as err:  # its own checks: but a schedule other than the baseline's is the likelier fix
        raise ValueError(_schedule_first(written, request, home, err)) from None
    shown = [o for o in request.overrides if not o.replace(" ", "").startswith("data.root=")]  # a location
    check_judgeable(method_profile, request.profile, request.metric)
    label = method_profile.name + (f" ({', '.join(shown)})" if shown else "")
    method = Side(label, method_profile.to_table(), request.profile, stem=run_stem(method_profile.name, shown,
                                                                                  method_profile.method.name))
    teacher = teacher_side(method_profile, method, request, home, one_thread, warn)
    baseline, base_views, base_table, base_path = find_baseline(request.baseline, request.results, home, warn)
    committed, aside = committed_by_seed(base_views)
    for line in aside:
        warn(f"left out of {baseline}: {line}")
    committed_seeds = sorted(committed)  # the seeds to judge by default, wherever they train
    sources = sorted(v.run_id for v in committed.values())
    if request.until_decided:
        seeds = list(range(request.max_seeds))
    elif request.seeds:
        seeds = parse_seeds(request.seeds)
    elif committed_seeds:
        seeds = committed_seeds
    else:
        raise ValueError(f"{baseline} has no committed runs to take the seeds from: give --seeds 0-4 or "
                         "--until-decided")
    committed, here_seeds = baseline_cpu_check(committed, baseline, pool, request.baseline_cpu, warn, seeds=seeds)
    runtime = ran_as(list(committed.values()))
    base_table = baseline_table(base_table, method.table, one_thread, runtime)
    amp = (method.table.get("train") or {}).get("amp")
    if runtime.get("amp") == "none" and amp != "none":
        warn(f"warning: {label} asks train.amp = {amp!r} (bf16 on a CPU with bf16 units, and on GPUs); {baseline}'s "
             "committed runs trained fp32: the paired differences would hold the precision's effect (--set "
             "train.amp=none judges the method alone)")
    for line in check_protocol(method.table, base_table, label, baseline, request.allow_protocol_difference):
        warn(line)
    if label == baseline:
        raise ValueError(f"the method and the baseline are both {baseline!r}: name a variant with --set, or another "
                         "profile")
    bases = {v.run_id: v for folder in request.bases for v in folder_runs(Path(folder))}
    return Spec(method, Side(baseline, base_table, base_path, committed), seeds, request.until_decided,
                request.metric, request.checkpoint, request.effect, request.allow_protocol_difference, bases, pool,
                request.to_json(), baseline_here=here_seeds, baseline_sources=sources, teacher=teacher)


def teacher_side(profile, method: Side, request: Request, home: Path, one_thread: bool, warn) -> Side | None:
    """A distillation's teacher (``method.teacher``). A profile (a .toml file, or profiles/NAME.toml): each seed's
    teacher is trained first with the student's seed, as a base, and paired with nothing. A run (id, name or
    folder) or a run's checkpoint: that one teacher for every seed, resolved to its file now (ValueError in one line
    when there is none). None: no teacher."""
    from engine.contract.profile_io import load_profile
    from fairtui.launch.launcher import resolve_init_from

    ref = str(getattr(profile.method, "teacher", "") or "")
    if not ref:
        return None
    path = Path(ref) if ref.endswith(".toml") else Path("profiles") / f"{ref}.toml"
    if path.is_file():
        teacher = load_profile(path)
        warn(f"teacher: {teacher.name} ({path}) is trained for each seed before its student, with the student's seed "
             "(give a run id or folder as method.teacher to distil one trained teacher instead)")
        table = baseline_table(teacher.to_table(), method.table, one_thread)
        return Side(f"{teacher.name} (teacher)", table, str(path), stem=teacher.name)
    resolved = resolve_init_from(profile, request.profile, home)  # a run's name -> its checkpoint file
    method.table["method"] = {**method.table["method"], "teacher": resolved.method.teacher}
    return None


def this_cpu() -> dict | None:
    """This machine's CPU as a run's provenance records it (model, vendor, the kernel-selecting instruction sets and
    torch's capability level), or None where it cannot be read. torch's capability comes from a child process, so
    that the command line and the app never import torch to ask."""
    import json
    import subprocess
    import sys

    # the engine's own record of a CPU (engine.runtime.provenance.cpu), asked of a child: the app imports only engine.contract
    code = ("import json, torch; from engine.runtime.provenance import cpu; "
            "print(json.dumps({'cpu': cpu(), 'determinism': {'cpu_capability': torch.backends.cpu.get_cpu_capability()}}))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def baseline_cpu_check(committed: dict, label: str, pool: list[str], choice: str, warn,
                       here: dict | None = None, seeds: list[int] | None = None) -> tuple[dict, list[int]]:
    """Before anything trains: the committed baseline seeds whose CPU ran other kernels than this machine's. With
    ``choice`` "here" they are trained here too (a pair is trained on one CPU: STATS.md), with "committed" they are
    kept and the crossing is said. The committed runs kept, and the seeds to train here (counted among ``seeds``)."""
    from fairtui.judge.machines import kernel_flags, kernel_kind, same_kernels
    from fairtui.runs.provenance import first_session

    if choice not in ("here", "committed"):
        raise ValueError(f"--baseline-cpu must be here or committed, got {choice!r}")
    if pool != ["cpu"] or not committed:
        return committed, []
    here = here if here is not None else this_cpu()
    if here is None:
        warn(f"warning: this machine's CPU could not be read: {label}'s committed runs are paired as they are")
        return committed, []
    other = {s: v for s, v in committed.items()
             if (first_session(v).get("provenance") or {}).get("cpu") and not same_kernels(
                 first_session(v).get("provenance") or {}, here)}
    if not other:
        return committed, []
    kinds = "; ".join(dict.fromkeys(kernel_kind(v) or "?" for v in other.values()))
    mine = f"{here['determinism']['cpu_capability']} on {here['cpu'].get('model', '?')} " \
           f"({', '.join(kernel_flags(here['cpu'])) or '-'})"
    listed = ", ".join(str(s) for s in sorted(other))
    if choice == "committed":
        warn(f"warning: {label}'s committed seeds {listed} trained on {kinds}; this machine is {mine}: their kernels "
             "round differently, and every pair of those seeds holds that difference with the method's "
             "(--baseline-cpu committed; the default trains them here)")
        return committed, []
    more = len(set(other) & set(seeds or other))
    warn(f"{label}'s committed seeds {listed} trained on {kinds}; this machine is {mine}: their kernels round differently"
         f", so those seeds of {label} are trained here too ({more} more run(s)), and each pair is trained on one CPU "
         "(--baseline-cpu committed pairs with the committed runs instead, saying so)")
    return {s: v for s, v in committed.items() if s not in other}, sorted(other)


def check_pool(pool: list[str], text: str | None) -> None:
    """--gpus names devices this machine has, as integers (a string never reaches a shell, but a queue entry that
    cannot start must not be made): ValueError in one line otherwise."""
    if pool == ["cpu"]:
        return
    bad = [g for g in pool if not g.isdigit()]
    if bad:
        raise ValueError(f"--gpus {text!r}: give GPU indices (0,1) or cpu, not {bad[0]!r}")
    from fairtui.launch.gpus import inventory

    have = len(inventory())
    missing = [g for g in pool if int(g) >= have]
    if missing:
        raise ValueError(f"--gpus {text!r}: this machine has {have} GPU(s)" + (f" (0 to {have - 1})" if have else "")
                         + f", not GPU {missing[0]}; --gpus cpu trains on the CPU")


def check_judgeable(profile, path: str, metric: str) -> None:
    """Before anything exists: the method's runs can be read on the metric (a robust attack in eval.attacks, a test
    evaluation at the end) and its data is where data.root says (ProfileError in one line, as `fairtui run`)."""
    from engine.contract.profile_io import check_data_root
    from engine.contract.profile_schema import ProfileError

    check_data_root(profile, path)
    if not profile.eval.test_at_end:
        raise ProfileError(path, "eval.test_at_end", "is false: a judgement reads each run's test result; set it true")
    if not [a for a in profile.eval.attacks if a != "clean"]:
        raise ProfileError(path, "eval.attacks", f"has no robust attack, and {metric} is a robust accuracy: add one "
                           '(eval.attacks = ["pgd20"])')


def folder_runs(folder: Path, warn=None) -> list[RunView]:
    """The runs of a folder of committed run files (ValueError when it is none); ``warn`` gets a line for each
    folder holding part of a run and each run with no result to give (an empty or cut stream)."""
    from fairtui.judge.compare import CompareError
    from fairtui.judge.sources import read_results, unusable_reason

    try:
        views, unusable = read_results([folder])
    except CompareError as err:
        raise ValueError(str(err)) from None
    for line in unusable + [unusable_reason(v) for v in views]:
        if line and warn is not None:
            warn(f"left out of --results: {line}")
    return views


def completed_views(results: list[str], home: Path, warn=None) -> list[RunView]:
    """The completed runs of the ``results`` folders and of the home, less any judgement's own runs."""
    from fairtui.runs.store import RunIndex

    views = [v for folder in results for v in folder_runs(Path(folder), warn)]
    if (home / "runs").is_dir():
        views += [RunView.load(home / "runs" / d["run_id"]) for d in RunIndex(home).read()
                  if d.get("status") == "completed"]
    return [v for v in views if v.status() == "completed"
            and not any(str(t).startswith("judge:") for t in v.meta.get("tags") or [])]


def find_baseline(label: str, results: list[str], home: Path, warn=None) -> tuple[str, list[RunView], dict, str]:
    """The baseline's label, its committed runs (a `--by profile` group of ``results`` and the home, never a
    judgement's own runs), the resolved profile its new seeds train, and where that came from. A label that is no
    group is taken as a profile (a file, or profiles/<label>.toml), labelled by its name."""
    from engine.contract.profile_io import load_profile, read_toml
    from fairtui.judge.families import source_of
    from fairtui.judge.sources import grouped

    groups = grouped(completed_views(results, home, warn), "profile")
    if label not in groups:  # the committed group, labelled apart from the home's own runs of that profile
        committed = [name for name in groups if name.startswith(label + " (")
                     and all(source_of(v) != "home" for v in groups[name])]
        from fairtui.runs.configurations import shipped_group

        shipped = committed[0] if len(committed) == 1 else shipped_group(label, {n: groups[n] for n in committed})
        if shipped is not None:
            if warn is not None:
                warn(f"--baseline {label}: the committed group {shipped!r} (your own runs of {label} in the home "
                     "are labelled apart by what they change)")
            label = shipped
    if label in groups:
        first = groups[label][0]
        return label, groups[label], read_toml(first.run_dir / "profile.toml"), str(first.run_dir / "profile.toml")
    looks_like_a_file = label.endswith(".toml") or "/" in label
    if groups and not looks_like_a_file and not Path(label).is_file():  # a group's label mistyped, not a profile
        from difflib import get_close_matches

        close = get_close_matches(label, list(groups), n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"--baseline {label!r}: no group of that label{hint}; the groups of the {len(results)} --results "
                         f"folder(s) and the home are: {', '.join(groups)}. To train the baseline from a profile, give "
                         f"its file (profiles/{label}.toml)")
    for candidate in (Path(label), Path("profiles") / f"{label}.toml"):
        if candidate.is_file():
            profile = load_profile(candidate)
            return profile.name, [], profile.to_table(), str(candidate)
    known = ", ".join(groups) or "none"
    raise ValueError(f"--baseline {label!r} is no group of the runs searched ({len(results)} --results folder(s) "
                     f"and the home: {known}) and no profile file")


# the runtime a committed run trained with -> the requests that give it again on any machine
RUNTIME_REQUESTS = {"fp32": {"amp": "none"}, "autocast bfloat16, channels-last": {"amp": "bf16", "channels_last": True},
                    "autocast bfloat16": {"amp": "bf16", "channels_last": False}}


def ran_as(views: list[RunView]) -> dict:
    """The train keys that make new runs train as the committed ``views`` did, where they all ran one runtime this
    machine can ask for: a committed row of ``amp = "auto"`` trained fp32 on a CPU without bf16 units, and its new
    seeds must too, here or on a CPU with them (#57). {} when they ran several, or none is committed."""
    from fairtui.runs.configurations import runtime_ran

    ran = {runtime_ran(v) for v in views}
    return dict(RUNTIME_REQUESTS.get(ran.pop(), {})) if len(ran) == 1 else {}


def baseline_table(table: dict, method: dict, one_thread: bool, runtime: dict | None = None) -> dict:
    """The table the baseline's new seeds train: its own profile, in the runtime its committed seeds ran
    (:func:`ran_as`), on the method's data folder (a location, not a setting) and, on the CPU's slots, one thread."""
    out = {**table, "data": dict(table.get("data") or {}), "train": {**(table.get("train") or {}), **(runtime or {})}}
    mine = method.get("data") or {}
    if mine.get("dataset") == out["data"].get("dataset") and mine.get("root"):
        out["data"]["root"] = mine["root"]
    if one_thread:
        out["train"]["threads"] = 1
    return out


def check_protocol(method: dict, baseline: dict, label: str, base_label: str, allow: bool) -> list[str]:
    """Refuse (ValueError), before anything trains, a method whose runs could not be paired with the baseline's: one
    line naming each difference (the measurement always; the training budget unless allowed). The allowed
    differences, as warnings."""
    from fairtui.judge.protocol import planned_differences

    lines = planned_differences(method, baseline)
    measured = [line for line in lines if line.startswith(("data.dataset", "eval.", "data.test_per_class"))]
    if measured or (lines and not allow):
        hint = "" if measured else " (the training budget: --allow-protocol-difference pairs them, naming it)"
        raise ValueError(f"{label} against {base_label}: " + "; ".join(measured or lines) + hint)
    return [f"warning: {label} against {base_label}: {line} (allowed)" for line in lines]


def _schedule_first(written: dict, request: Request, home: Path, err: Exception) -> str:
    """A profile refused on its own checks whose train.epochs differs from the baseline's: the schedule first."""
    try:
        base_table = find_baseline(request.baseline, request.results, home, lambda line: None)[2]
    except (ValueError, OSError):
        return str(err)
    mine, theirs = (written.get("train") or {}).get("epochs"), (base_table.get("train") or {}).get("epochs")
    same = mine is None or theirs is None or mine == theirs
    return str(err) if same else (f"{request.profile}: train.epochs is {mine} where {request.baseline} trained "
                                  f"{theirs}: a judgement pairs runs of one schedule (and, within it: {err})")
