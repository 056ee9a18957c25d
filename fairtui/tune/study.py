"""`fairtui tune`: the same tuning budget for every method, on validation, with Optuna.

A study searches a profile's keys (``--space KEY=SPEC``) with Optuna's TPE sampler (seeded), every trial an
ordinary fairtui run (tagged ``study:NAME`` and ``trial:N``) that trains through the local queue,
``--parallel`` at a time, and never touches the test split (``eval.test_at_end = false``). Each epoch's
validation numbers give the trial's objective (:data:`OBJECTIVES`), reported to Optuna's pruner (median or
Hyperband), which may stop a hopeless trial: its run is stopped and tagged ``pruned``. A trial's value is its
objective at its last epoch. When the study has its trials, the best trial's run is evaluated on the test split
once, at its profile's own settings (``fairtui tune finish STUDY`` does it for a study stopped before).

The study lives in Optuna's own journal storage, ``<home>/studies/<name>.journal`` (optuna-dashboard opens it;
several processes may add trials to it). Its writers take a kernel lock on ``<name>.journal.flock``
(:class:`FlockLock`), not Optuna's default symlink, which a killed writer leaves behind for every later writer to
wait 30 s on (a driver that took a minute to answer Ctrl-C); another program that writes the journal must take it
too, or only read. The driver (:mod:`fairtui.tune.driver`) records each trial's run id in the
trial, so ``fairtui tune STUDY --resume`` after a crash, a Ctrl-C or a kill -9 follows the trials whose runs still
train, resumes those that were stopped, records those that ended, and asks for new ones only up to the budget: no
trial is lost or run twice.

Optuna is an extra (``pip install 'fairtui[tune]'``); only this module imports it, and only when a study runs.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from fairtui.tune.journal import FlockLock
from fairtui.tune.space import Dimension, Objective, TuneError
from fairtui.tune.trials import (DRIVER_STOPPED, machine_reason, objective_text, shown_params,  # noqa: F401
                                 summary, unmark_stopped)

STUDIES = "studies"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
EXTRA = "pip install 'fairtui[tune]'"


def optuna():
    try:
        import optuna as module
    except ImportError:
        raise TuneError("tune", f"needs Optuna: {EXTRA}") from None
    module.logging.set_verbosity(module.logging.WARNING)
    return module


class StorageError(RuntimeError):
    """The study or a trial's run could not be written (a full or read-only disk): one line, exit 1. What was
    recorded stays; the trials' runs train on, and ``fairtui tune STUDY --resume`` continues."""


def storage_error(err: OSError, path: Path, after: str) -> StorageError:
    return StorageError(f"cannot write {err.filename or path}: {err.strerror or err}; {after}")


def study_path(home: Path, name: str) -> Path:
    return home / STUDIES / f"{name}.journal"


def storage(home: Path, name: str):
    opt = optuna()
    from optuna.storages.journal import JournalFileBackend

    path = study_path(home, name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return opt.storages.JournalStorage(JournalFileBackend(str(path), lock_obj=FlockLock(path)))
    except OSError as err:
        raise storage_error(err, path, "nothing was made") from None


# The median pruner compares a trial with the finished ones only from the first epoch after the schedule's
# first learning-rate decay, and only once PRUNE_STARTUP trials have finished (Optuna's default). Studies
# made before pruned from epoch 1 after 2 finished trials: on digits' 30-epoch schedule (decay after epoch
# 20) that stopped 14 of PGD-AT's and of TRADES's 16 trials within their first three epochs, where robust
# accuracy says little of where a configuration ends (TRADES's trial 11, pruned, had the best trial's
# beta). A study records both numbers; one made before has neither and keeps the old ones.
PRUNE_STARTUP = 5


def prune_after(train: Any) -> int:
    """The first epoch a median pruner may stop a trial at: the first epoch trained after the schedule's
    first learning-rate decay (``train.milestones``, in epochs, of a piecewise schedule), or half-way through
    ``train.epochs`` when the schedule has no step (cosine, constant)."""
    if train.schedule == "piecewise" and train.milestones:
        return min(int(train.milestones[0]) + 1, train.epochs)
    return max(1, train.epochs // 2)


def sampler_and_pruner(seed: int, pruner: str, after: int = 1, startup: int = PRUNE_STARTUP):
    """Optuna's seeded TPE sampler and the study's pruner; ``after`` and ``startup`` are the median pruner's
    first epoch and the number of finished trials it waits for."""
    opt = optuna()
    prune = {"median": lambda: opt.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=after),
             "hyperband": lambda: opt.pruners.HyperbandPruner(),
             "none": lambda: opt.pruners.NopPruner()}
    if pruner not in prune:
        raise TuneError("--pruner", f"choose median, hyperband or none, got {pruner!r}")
    return opt.samplers.TPESampler(seed=seed), prune[pruner]()


@dataclasses.dataclass
class Request:
    """A new study (``profile_path`` given) or a resumed one (the rest read back from the study)."""

    home: Path
    study: str
    profile_path: str = ""
    space: list[Dimension] = dataclasses.field(default_factory=list)
    base: list[str] = dataclasses.field(default_factory=list)  # --set items of every trial
    trials: int = 0
    objective: Objective = Objective("avg_worst")
    parallel: int = 1
    pruner: str = "median"
    seed: int = 0
    gpus: str | None = None
    slurm: dict | None = None  # SlurmSettings as a dict: each trial is a Slurm job (None: the local queue)
    interval: float = 1.0
    prune_after: int = 1  # the median pruner's first epoch (:func:`prune_after` of the profile)
    prune_startup: int = PRUNE_STARTUP  # the finished trials it waits for

    def slurm_settings(self):
        from fairtui.launch.slurm import SlurmSettings

        return SlurmSettings(**self.slurm) if self.slurm else None

    @staticmethod
    def slurm_text(slurm: dict | None) -> str:
        return "" if not slurm else (f"{slurm.get('cluster')}" + (f", partition {slurm['partition']}"
                                                                  if slurm.get("partition") else ""))


def create(req: Request, unique: bool = False):
    """The study, made and described (its profile, space, objective, budget), or refused when its name is
    another profile's study or being made by another command. Its journal is made exclusively first, so two
    commands at the same instant never make one study twice; with ``unique`` (a name the command chose, not the
    user) a taken name becomes NAME-2, NAME-3, ... and ``req.study`` says which."""
    import os

    opt = optuna()
    sampler, pruner = sampler_and_pruner(req.seed, req.pruner, req.prune_after, req.prune_startup)
    first = req.study
    for attempt in range(2, 1002):
        path = study_path(req.home, req.study)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            break
        except FileExistsError:
            if not unique:
                raise _refusal(req, opt) from None
            req.study = f"{first}-{attempt}"
        except OSError as err:
            raise storage_error(err, path, "nothing was made") from None
    described = {"profile_path": req.profile_path, "space": [dataclasses.asdict(d) for d in req.space],
                 "base": req.base, "trials": req.trials, "objective": dataclasses.asdict(req.objective),
                 "parallel": req.parallel, "pruner": req.pruner, "seed": req.seed, "gpus": req.gpus,
                 "slurm": req.slurm, "prune_after": req.prune_after, "prune_startup": req.prune_startup}
    try:
        study = opt.create_study(study_name=req.study, storage=storage(req.home, req.study), direction="maximize",
                                 sampler=sampler, pruner=pruner)
        for key, value in described.items():
            study.set_user_attr(key, value)
    except BaseException as err:  # a study half made is no study: its journal goes (it is its own)
        path.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise storage_error(err, path, "nothing was made") from None
        raise
    return study


def _refusal(req: Request, opt) -> TuneError:
    """Why a study's journal exists already: its study (named, with how to continue it), or one being made."""
    existing = {s.study_name: s for s in opt.get_all_study_summaries(storage(req.home, req.study))}
    if req.study in existing:
        old = existing[req.study].user_attrs
        if old.get("profile_path") != req.profile_path:
            return TuneError("--study", f"{req.study!r} is a study of {old.get('profile_path')!r}; choose another "
                             f"name (or `fairtui tune {req.study} --resume` to continue it)")
        return TuneError("--study", f"{req.study!r} exists: `fairtui tune {req.study} --resume` continues it")
    return TuneError("--study", f"{req.study!r} is being made by another command (or a command killed while making "
                    f"it left {study_path(req.home, req.study)} empty: remove that file); choose another name")


def studies(home: Path) -> list[str]:
    """The names of the home's studies, oldest first."""
    folder = home / STUDIES
    paths = sorted(folder.glob("*.journal"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    return [p.stem for p in paths]


def resolve_study(home: Path, name: str) -> str:
    """A study's name from its full name or a unique prefix of it, as runs take one."""
    if study_path(home, name).exists():
        return name
    known = studies(home)
    matching = [s for s in known if s.startswith(name)]
    if len(matching) == 1:
        return matching[0]
    if matching:
        raise TuneError("STUDY", f"{name!r} starts {len(matching)} studies: {', '.join(matching[:10])}; give more of "
                        "the name")
    listed = f" (the home's: {', '.join(known[-10:])})" if known else " (the home has none)"
    raise TuneError("STUDY", f"no study {name!r} in {home / STUDIES}{listed}")


def load(home: Path, name: str, to_run: bool = True) -> tuple[Any, Request]:
    """A study and the request it was made with, checked (:func:`checked_request`; ``to_run`` False to read it).
    ``name``: the study's name, or a unique prefix of it."""
    opt = optuna()
    name = resolve_study(home, name)
    from fairtui.tune.journal import check_journal, checked_settings

    try:
        check_journal(study_path(home, name), repair=to_run)
    except OSError as err:
        raise storage_error(err, study_path(home, name), "nothing was resumed") from None
    store = storage(home, name)
    try:
        study = opt.load_study(study_name=name, storage=store)
    except KeyError:
        raise TuneError("STUDY", f"no study {name!r} in {study_path(home, name)}") from None
    except (AssertionError, ValueError, TypeError) as err:  # a line Optuna's replay cannot apply
        raise TuneError("STUDY", f"{study_path(home, name)}: Optuna cannot replay this journal ({err or type(err).__name__}); "
                        "nothing was resumed") from None
    req = Request(home=home, study=name, **checked_settings(study.user_attrs, study_path(home, name), to_run))
    made = len(study.get_trials(deepcopy=False))
    study.sampler, study.pruner = sampler_and_pruner(resumed_seed(req.seed, made), req.pruner, req.prune_after,
                                                     req.prune_startup)
    return study, req


def resumed_seed(seed: int, made: int) -> int:
    """The sampler's seed for a study that holds ``made`` trials: ``seed`` for a new one; for a resumed one a
    seed of its own, fixed by (seed, made). A sampler seeded again with ``seed`` starts its random stream over:
    in TPE's random start-up trials, the first trial after a resume drew trial 0's parameters again (seen on
    digits: FRL's trial 9, after a resume at 9 trials, repeated trial 0). Optuna keeps no sampler state in the
    study, so a resumed study cannot draw what an uninterrupted one would have; it draws reproducibly and anew."""
    if made == 0:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed, made]).generate_state(1)[0])
