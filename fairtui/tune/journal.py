"""Reading a study back from its journal as input, not trusted state: every line one of Optuna's operations, and every
setting the study was made with checked as the command line checks it (`fairtui tune STUDY --resume`, `tune show`).
A journal may be committed, copied and edited, so a bad value stops the resume in one line naming the journal and the
key, before any trial or run exists."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from pathlib import Path

from fairtui.tune.space import Dimension, Objective, TuneError


# The fields Optuna's journal reader takes from each operation without asking (optuna.storages.journal._storage's
# _apply_* functions, Optuna 5), with their types: a line with a known op_code and one of these missing or of another
# type raised a KeyError or TypeError from inside Optuna (97 lines), where it is one line here.
NUMBER = (int, float)
OP_FIELDS: dict[int, dict[str, type | tuple]] = {
    0: {"study_name": str, "directions": list},  # CREATE_STUDY
    1: {"study_id": int},  # DELETE_STUDY
    2: {"study_id": int, "user_attr": dict},  # SET_STUDY_USER_ATTR
    3: {"study_id": int, "system_attr": dict},  # SET_STUDY_SYSTEM_ATTR
    4: {"study_id": int},  # CREATE_TRIAL (its params and distributions are optional)
    5: {"trial_id": int, "param_name": str, "param_value_internal": NUMBER, "distribution": str},  # SET_TRIAL_PARAM
    6: {"trial_id": int, "state": int},  # SET_TRIAL_STATE_VALUES
    7: {"trial_id": int, "step": int, "intermediate_value": NUMBER},  # SET_TRIAL_INTERMEDIATE_VALUE
    8: {"trial_id": int, "user_attr": dict},  # SET_TRIAL_USER_ATTR
    9: {"trial_id": int, "system_attr": dict},  # SET_TRIAL_SYSTEM_ATTR
}


def check_journal(path: Path, repair: bool = False) -> None:
    """Every complete line of a study's journal is one of Optuna's operations (a JSON object with a known
    ``op_code``), else one line naming the journal and the line. A last line without its newline (cut by a
    kill or a full disk) is an operation that never happened: Optuna skips it when it reads, and ``repair``
    (before a resume appends) cuts it off, so that the next operation starts a line of its own (an OSError of
    that write is the caller's to report)."""
    import json

    from optuna.storages.journal._storage import JournalOperation

    known = {int(op) for op in JournalOperation}
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TuneError("STUDY", f"{path}: cannot be read: {err.strerror or err}") from None
    lines = data.split(b"\n")[:-1]  # the part after the last newline is not a whole line
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            op = json.loads(line)
        except ValueError:
            raise TuneError("STUDY", f"{path}: line {number} is not JSON; the journal was edited or damaged "
                            "(remove the line, or restore the file), nothing was resumed") from None
        if not isinstance(op, dict) or op.get("op_code") not in known or not isinstance(op.get("worker_id"), str):
            raise TuneError("STUDY", f"{path}: line {number} is not an Optuna journal operation; the journal was "
                            "edited or damaged (remove the line, or restore the file), nothing was resumed")
        missing = [key for key, kind in OP_FIELDS.get(op["op_code"], {}).items()
                   if not isinstance(op.get(key), kind) or isinstance(op.get(key), bool)]
        if missing:
            raise TuneError("STUDY", f"{path}: line {number} (op_code {op['op_code']}) lacks {', '.join(missing)}, or holds another type; the "
                            "journal was edited or damaged (remove the line, or restore the file), nothing was resumed")
    if repair and not data.endswith(b"\n") and data:
        from engine.contract.locks import locked

        with locked(lock_path(path)):  # a writer's line in flight is no cut line: read again under the writers' lock
            data = path.read_bytes()
            cut = len(data) - (data.rfind(b"\n") + 1)
            if cut:
                with open(path, "r+b") as fh:
                    fh.truncate(len(data) - cut)


def lock_path(journal: Path) -> Path:
    """The file whose flock guards a study's journal: ``<journal>.flock``."""
    return Path(str(journal) + ".flock")


class FlockLock:
    """The journal's write lock (Optuna's BaseJournalFileLock interface: ``acquire``, ``release``): an exclusive
    flock on :func:`lock_path` (engine.contract.locks.locked). The kernel releases it when its holder dies, however
    it dies; Optuna's symlink lock outlives a killed holder and makes every later write wait its 30 s grace period."""

    def __init__(self, journal: Path) -> None:
        self.path = lock_path(journal)
        self._held: contextlib.ExitStack | None = None

    def acquire(self) -> bool:
        from engine.contract.locks import locked

        with contextlib.ExitStack() as stack:
            stack.enter_context(locked(self.path))
            self._held = stack.pop_all()
        return True

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()


def checked_settings(attrs: dict, journal: Path, to_run: bool = True) -> dict:
    """The settings a study was made with (fairtui.tune.study.Request's fields but its home and name), read back from its
    journal and checked as the command line is: the
    journal is input (it may be committed, copied, edited), so a value the command line would refuse stops the
    resume with one line naming the journal and the key, before anything runs. ``to_run`` False (``show``): the
    profile file need not exist here, so the checks against it are left out; every value is still typed."""
    from engine.contract.profile_io import load_profile
    from engine.contract.profile_schema import ProfileError
    from fairtui.tune.space import OBJECTIVES, check_space

    def refuse(key: str, why: str) -> TuneError:
        return TuneError("STUDY", f"{journal}: the recorded {key} {why}; nothing was resumed")

    def whole(key: str, low: int, high: int = 2**63 - 1, default: int | None = None) -> int:
        value = attrs.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise refuse(key, f"is {value!r}, not a whole number from {low} to {high}")
        return value

    profile_path = attrs.get("profile_path")
    if not isinstance(profile_path, str) or (to_run and not Path(profile_path).is_file()):
        raise refuse("profile_path", f"{profile_path!r} is not a profile file here")
    base = attrs.get("base")
    if not isinstance(base, list) or not all(isinstance(b, str) and "=" in b for b in base):
        raise refuse("base", "is not a list of KEY=VALUE items")
    if to_run:
        try:
            load_profile(profile_path, base)
        except ProfileError as err:
            raise refuse("base", f"is refused by the profile: {err}") from None
    space = _recorded_space(attrs.get("space"), refuse)
    if to_run:
        check_space(profile_path, base, space)
    objective = attrs.get("objective") or {}
    if not isinstance(objective, dict) or objective.get("name") not in OBJECTIVES:
        raise refuse("objective", f"{objective!r} is not one of {', '.join(OBJECTIVES)}")
    floor = objective.get("floor")
    if objective["name"] == "worst_at_avg" and not (isinstance(floor, (int, float)) and math.isfinite(floor)
                                                    and -1 <= floor <= 1):
        raise refuse("objective", f"floor {floor!r} is not a finite fraction")
    pruner = attrs.get("pruner")
    if pruner not in ("median", "hyperband", "none"):
        raise refuse("pruner", f"{pruner!r} is not median, hyperband or none")
    gpus = attrs.get("gpus")
    if gpus is not None and not (isinstance(gpus, str) and re.fullmatch(r"cpu|\d{1,3}(,\d{1,3})*", gpus)):
        raise refuse("gpus", f"{gpus!r} is not 'cpu' or device indices like 0,1")
    slurm = _recorded_slurm(attrs.get("slurm"), refuse)
    # a study made before prune_after and prune_startup were recorded pruned from epoch 1 after 2 trials; so on
    return dict(profile_path=profile_path, space=space, base=list(base), trials=whole("trials", 1),
                objective=Objective(objective["name"], floor), parallel=whole("parallel", 1, 1024), pruner=pruner,
                seed=whole("seed", 0, 2**32 - 1), gpus=gpus, slurm=slurm,
                prune_after=whole("prune_after", 1, default=1), prune_startup=whole("prune_startup", 0, default=2))


def _recorded_space(recorded, refuse) -> list[Dimension]:
    """The journal's search space, each dimension written back as the command line's KEY=SPEC and parsed by the
    same code: an entry that is not what ``--space`` would give is refused (``refuse(key, why)``)."""
    from fairtui.tune.space import parse_dimension

    space = []
    for d in recorded if isinstance(recorded, list) else [None]:
        try:
            dim = Dimension(**{**d, "choices": tuple(d.get("choices") or ())})
            if dim.kind not in ("float", "int", "choice"):
                raise ValueError(dim.kind)
            again = parse_dimension(f"{dim.key}={dim.spec()}")
        except (TypeError, ValueError, AttributeError) as err:
            raise refuse("space", f"entry {d!r} is not a search dimension ({err})") from None
        if again != dim:
            raise refuse("space", f"entry {d!r} is not what --space {dim.key}={dim.spec()} gives")
        space.append(dim)
    return space


def _recorded_slurm(slurm, refuse) -> dict | None:
    """The journal's Slurm settings, checked as `--launcher slurm`'s options are (None: a local study)."""
    if slurm is None:
        return None
    from engine.contract.profile_schema import ProfileError
    from fairtui.launch.slurm import SlurmSettings

    try:
        if not isinstance(slurm, dict):
            raise ProfileError("journal", "slurm", "not a table")
        settings = SlurmSettings.from_sources({k: v for k, v in slurm.items() if v is not None})
    except (ProfileError, TypeError) as err:
        raise refuse("slurm", f"settings are refused: {err}") from None
    return dataclasses.asdict(settings)
