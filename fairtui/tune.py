"""`fairtui tune`: the same tuning budget for every method, on validation, with Optuna.

A study searches a profile's keys (``--space KEY=SPEC``) with Optuna's TPE sampler (seeded), every trial an
ordinary fairtui run (tagged ``study:NAME`` and ``trial:N``) that trains through the local queue,
``--parallel`` at a time, and never touches the test split (``eval.test_at_end = false``). Each epoch's
validation numbers give the trial's objective (:data:`OBJECTIVES`), reported to Optuna's pruner (median or
Hyperband), which may stop a hopeless trial: its run is stopped and tagged ``pruned``. A trial's value is its
objective at its last epoch. When the study has its trials, the best trial's run is evaluated on the test split
once, at its profile's own settings (``fairtui tune finish STUDY`` does it for a study stopped before).

The study lives in Optuna's own journal storage, ``<home>/studies/<name>.journal`` (optuna-dashboard opens it;
several processes may add trials to it). The driver records each trial's run id in the trial, so
``fairtui tune STUDY --resume`` after a crash, a Ctrl-C or a kill -9 follows the trials whose runs still train,
resumes those that were stopped, records those that ended, and asks for new ones only up to the budget: no
trial is lost or run twice.

Optuna is an extra (``pip install 'fairtui[tune]'``); only this module imports it, and only when a study runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any, Callable

from fairtui.tune_space import Dimension, Objective, TuneError, override
from fairtui.tune_trials import (DRIVER_STOPPED, machine_reason, objective_text, shown_params,  # noqa: F401
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
        return opt.storages.JournalStorage(JournalFileBackend(str(path)))
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
        from fairtui.slurm import SlurmSettings

        return SlurmSettings(**self.slurm) if self.slurm else None

    @staticmethod
    def slurm_text(slurm: dict | None) -> str:
        return "" if not slurm else (f"{slurm.get('cluster')}" + (f", partition {slurm['partition']}"
                                                                  if slurm.get("partition") else ""))


def create(req: Request):
    """The study, made and described (its profile, space, objective, budget), or refused when its name is
    another profile's study."""
    opt = optuna()
    sampler, pruner = sampler_and_pruner(req.seed, req.pruner, req.prune_after, req.prune_startup)
    described = {"profile_path": req.profile_path, "space": [dataclasses.asdict(d) for d in req.space],
                 "base": req.base, "trials": req.trials, "objective": dataclasses.asdict(req.objective),
                 "parallel": req.parallel, "pruner": req.pruner, "seed": req.seed, "gpus": req.gpus,
                 "slurm": req.slurm, "prune_after": req.prune_after, "prune_startup": req.prune_startup}
    store = storage(req.home, req.study)
    existing = {s.study_name: s for s in opt.get_all_study_summaries(store)}
    if req.study in existing:
        old = existing[req.study].user_attrs
        if old.get("profile_path") != req.profile_path:
            raise TuneError("--study", f"{req.study!r} is a study of {old.get('profile_path')!r}; choose another name "
                            f"(or `fairtui tune {req.study} --resume` to continue it)")
        raise TuneError("--study", f"{req.study!r} exists: `fairtui tune {req.study} --resume` continues it")
    path = study_path(req.home, req.study)
    try:
        study = opt.create_study(study_name=req.study, storage=store, direction="maximize", sampler=sampler,
                                 pruner=pruner)
        for key, value in described.items():
            study.set_user_attr(key, value)
    except OSError as err:  # a study half made is no study: its journal goes (no other study shares the file)
        path.unlink(missing_ok=True)
        raise storage_error(err, path, "nothing was made") from None
    return study


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
    from fairtui.tune_journal import check_journal, checked_settings

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


class Driver:
    """Runs a study's trials to its budget: asks Optuna, starts runs through the queue, reports each epoch,
    prunes, and tells Optuna how each trial ended."""

    def __init__(self, study, req: Request, say: Callable[[str], None] = lambda line: None):
        from fairtui.queue import LocalQueue

        self.study, self.req, self.say = study, req, say
        self.queue = LocalQueue(req.home, per_gpu=req.parallel)
        self.active: dict[int, dict] = {}  # trial number -> {"trial", "run_id", "reported"}
        # trials whose run ended for the machine's reasons (a full disk, a killed engine): left RUNNING in the
        # journal, not counted and not replaced by this driver; `--resume` resumes their runs
        self.held: dict[int, str] = {}
        self._steps = 0  # > 0 inside a step that must not be cut (a start through the queue, a trial's record)
        self._interrupted = False  # a stop asked for inside such a step, raised when it ends

    def interrupt(self) -> None:
        """A stop (Ctrl-C, SIGTERM, SIGHUP: the command's signal handler calls this): KeyboardInterrupt now, or at
        the end of the step under way. A start cut between spawning an engine and taking the run off the queue
        left a run marked queued that nobody would start, while its engine trained it: the study waited on it
        for ever."""
        if self._steps:
            self._interrupted = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def _step(self):
        self._steps += 1
        try:
            yield
        finally:
            self._steps -= 1
        if not self._steps and self._interrupted:
            self._interrupted = False
            raise KeyboardInterrupt

    # a trial's run
    def _start(self, trial) -> None:
        from engine.contract.profile_io import load_profile
        from fairtui.launcher import GpuChoice, create_run

        params = {d.key: d.suggest(trial) for d in self.req.space}
        sets = [*self.req.base, *(override(k, v) for k, v in params.items()), "eval.test_at_end=false"]
        profile = load_profile(self.req.profile_path, sets)
        gpus = GpuChoice.parse(self.req.gpus)
        run_dir = create_run(self.req.home, profile, self.req.profile_path, f"{self.req.study}-t{trial.number}",
                             [f"study:{self.req.study}", f"trial:{trial.number}"], gpus,
                             extra_meta={"study": self.req.study, "trial": trial.number, "params": params})
        trial.set_user_attr("run_id", run_dir.name)
        self._launch(run_dir)
        self.active[trial.number] = {"trial": trial, "run_id": run_dir.name, "reported": 0}
        self.say(f"trial {trial.number}: run {run_dir.name} {shown_params(params)}")

    def _adopt(self, frozen) -> None:
        """A trial a crashed driver left running: follow its run, resuming it if it stopped."""
        opt = optuna()
        run_id = frozen.user_attrs.get("run_id") or self._run_of(frozen.number)
        trial = opt.trial.Trial(self.study, frozen._trial_id)
        if run_id and not frozen.user_attrs.get("run_id"):  # killed between making the run and recording it
            trial.set_user_attr("run_id", run_id)
        if not run_id or not (self.req.home / "runs" / run_id).exists():  # killed before its run existed
            trial.set_user_attr("no_run", True)  # it does not count against the budget ...
            self.study.tell(frozen.number, state=opt.trial.TrialState.FAIL)
            if frozen.params:
                self.study.enqueue_trial(frozen.params)  # ... and its configuration is tried next
            self.say(f"trial {frozen.number}: the driver was killed before its run was made; its configuration "
                     "is tried again")
            return
        from fairtui.runfolder import RunView

        run_dir = self.req.home / "runs" / run_id
        status = RunView.load(run_dir).status()  # "running" too for an engine the killed driver was starting
        if frozen.user_attrs.get("held"):
            trial.set_user_attr("held", None)
        if status in ("stopped", "lost", "failed") and "pruned" not in self._tags(run_id):
            unmark_stopped(run_dir)
            self._launch(run_dir)  # resumes from its checkpoint
            self.say(f"trial {frozen.number}: resuming run {run_id} ({status})")
        elif status == "queued" and not self.req.slurm and not self.queue.holds(run_id):
            self._launch(run_dir)  # its driver was stopped before the queue started it: queued again
            self.say(f"trial {frozen.number}: run {run_id} queued again")
        self.active[frozen.number] = {"trial": trial, "run_id": run_id,
                                      "reported": max((int(s) for s in frozen.intermediate_values), default=0)}

    def _launch(self, run_dir: Path) -> None:
        """Start (or continue) a trial's run: through the local queue, on any one of ``--gpus`` (or the CPU),
        or as a Slurm job of its own (``--launcher slurm``)."""
        settings = self.req.slurm_settings()
        if settings is not None:
            from engine.contract.profile_schema import ProfileError
            from fairtui.slurm import submit_run

            try:
                submit_run(self.req.home, run_dir, settings)
            except ProfileError as err:  # sbatch refused it: the run says failed, and _follow records the trial
                self.say(f"run {run_dir.name}: {err}")
            return
        from fairtui.launcher import GpuChoice

        gpus = GpuChoice.parse(self.req.gpus)
        pool = ["cpu"] if gpus is None or gpus.cpu else [str(g) for g in gpus.devices]  # any one device of them
        self.queue.submit(run_dir, None, pool=pool)

    def _run_of(self, number: int) -> str | None:
        """The run made for trial ``number`` of this study, from the runs' own meta.json."""
        import json

        for meta_path in sorted((self.req.home / "runs").glob("*/meta.json")):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            if meta.get("study") == self.req.study and meta.get("trial") == number:
                return meta_path.parent.name
        return None

    def _tags(self, run_id: str) -> list[str]:
        import json

        try:
            return json.loads((self.req.home / "runs" / run_id / "meta.json").read_text()).get("tags", [])
        except (OSError, ValueError):
            return []

    def _follow(self, number: int) -> bool:
        """Report new epochs, prune, or record the end; True when the trial is done."""
        from fairtui.launcher import change_meta
        from fairtui.runfolder import RunView

        opt = optuna()
        entry = self.active[number]
        run_dir = self.req.home / "runs" / entry["run_id"]
        view = RunView.load(run_dir)
        # the status with the events it was read with: reporting can wait on the study's lock (seconds), after
        # which a fresh liveness check against these events would call a run that finished meanwhile lost
        status = view.status()
        trial = entry["trial"]
        for event in view.epochs:
            if event["epoch"] <= entry["reported"]:
                continue
            value = self.req.objective.value(event)
            entry["reported"] = event["epoch"]
            if value is None:
                continue
            trial.report(value, event["epoch"])
            self.say(f"trial {number}: epoch {event['epoch']}/{event.get('epochs', '?')}, objective "
                     f"{objective_text(value)}")
            if trial.should_prune() and status == "running":
                from fairtui.control import StopError, stop_run

                change_meta(run_dir, lambda m: m.update(tags=[*m.get("tags", []), "pruned"], pruned=True))
                try:
                    stop_run(run_dir, wait=False)
                except StopError:
                    pass
                self.study.tell(number, state=opt.trial.TrialState.PRUNED)
                self.say(f"trial {number}: pruned after epoch {event['epoch']} ({objective_text(value)})")
                return True
        if status == "completed":
            values = [self.req.objective.value(e) for e in view.epochs]
            value = values[-1] if values and values[-1] is not None else None
            if value is None:
                self.study.tell(number, state=opt.trial.TrialState.FAIL)
            else:
                self.study.tell(number, value)
                self.say(f"trial {number}: {objective_text(value)}")
            return True
        if status == "stopped" and view.meta.get(DRIVER_STOPPED):  # this driver's own stop (an earlier Ctrl-C)
            unmark_stopped(run_dir)
            self._launch(run_dir)
            self.say(f"trial {number}: run {entry['run_id']} was stopped with its study; resuming it")
            return False
        if status == "queued" and not self.req.slurm and not self.queue.holds(entry["run_id"]):
            # marked queued with no entry to start it (a start cut by a stop in fairtui before 2026-11-27, its
            # entry then cancelled): nobody else would start it, and the study would wait on it for ever
            self._launch(run_dir)
            self.say(f"trial {number}: run {entry['run_id']} was marked queued with no queue entry; queued again")
            return False
        reason = machine_reason(view, status)
        if reason is not None:  # not the trial's doing: kept for --resume, not counted
            trial.set_user_attr("held", reason)
            self.held[number] = reason
            self.say(f"trial {number}: run {entry['run_id']} {status} ({reason}); not counted: `fairtui tune "
                     f"{self.req.study} --resume` resumes it")
            return True
        if status in ("failed", "lost") or (status == "stopped" and "pruned" not in self._tags(entry["run_id"])):
            if status == "stopped":  # stopped by hand: the driver takes it as the user's choice
                self.say(f"trial {number}: its run was stopped; recorded as failed")
            self.study.tell(number, state=opt.trial.TrialState.FAIL)
            self.say(f"trial {number}: run {entry['run_id']} {status}")
            return True
        return False

    def run(self) -> None:
        """The study to its budget. A write that fails (a full or read-only disk) ends it with a StorageError:
        what the journal holds stays, the trials' runs train on, and --resume adopts them. One driver a study:
        a second (`tune S --resume` while `tune S` runs) is refused naming the first."""
        lock = self._driver_lock()
        try:
            self._run()
        except OSError as err:
            raise storage_error(err, study_path(self.req.home, self.req.study),
                                f"the study stopped; its trials' runs train on, and `fairtui tune {self.req.study} "
                                "--resume` continues it once the disk can be written") from None
        finally:
            lock.close()

    def _driver_lock(self):
        """``studies/<name>.driver``, locked for the driver's life (flock: a killed driver releases it), with its
        pid and host written in, for the refusal of a second driver to name it."""
        import os
        import socket

        from engine.contract.locks import try_lock

        path = study_path(self.req.home, self.req.study).with_suffix(".driver")
        lock = try_lock(path, patience=0.5)
        if lock is None:
            try:
                holder = path.read_text().strip() or "another process"
            except OSError:
                holder = "another process"
            raise TuneError("STUDY", f"{self.req.study}: another `fairtui tune` drives this study ({holder}); let it "
                            "finish, or stop it (Ctrl-C) and resume")
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}")
        lock.flush()
        return lock

    def _run(self) -> None:
        opt = optuna()
        states = opt.trial.TrialState
        with self._step():
            for frozen in self.study.get_trials(deepcopy=False, states=(states.RUNNING,)):
                self._adopt(frozen)
        while True:
            with self._step():  # a stop waits for the step's end (the sleep is where a driver spends its time)
                finished = [t for t in self.study.get_trials(deepcopy=False) if t.state in
                            (states.COMPLETE, states.PRUNED, states.FAIL) and not t.user_attrs.get("no_run")]
                while len(self.active) < self.req.parallel and \
                        len(finished) + len(self.active) + len(self.held) < self.req.trials:
                    self._start(self.study.ask())
                if not self.active:
                    return
                if not self.req.slurm:
                    self.queue.tick()
                for number in list(self.active):
                    if self._follow(number):
                        del self.active[number]
            time.sleep(self.req.interval)

    def stop(self) -> None:
        """Ctrl-C, SIGTERM or SIGHUP: the trials' runs stop cleanly, each marked as stopped by its driver (not
        by hand); the study keeps them as running, and --resume resumes them (a run still queued is queued
        again)."""
        from fairtui.control import StopError, stop_run
        from fairtui.launcher import change_meta

        for entry in self.active.values():
            run_dir = self.req.home / "runs" / entry["run_id"]
            if not self.req.slurm:
                self.queue.cancel(entry["run_id"])
            try:
                change_meta(run_dir, lambda m: m.update({DRIVER_STOPPED: True}))
                stop_run(run_dir, wait=False)
            except (StopError, OSError):
                pass


def finish(study, req: Request, say: Callable[[str], None] = lambda line: None) -> dict | None:
    """Evaluate the best trial's run on the test split, once, at its profile's own settings (the attacks of
    the profile's [eval]), on its last checkpoint (the trial's value is its last epoch's); record it."""
    import subprocess
    import sys

    from engine.contract.profile_io import load_profile

    done = study.user_attrs.get("finished")
    if done:
        say(f"the study was finished before: run {done['run_id']} (trial {done['trial']})")
        return done
    try:
        best = study.best_trial
    except ValueError:
        raise TuneError("STUDY", f"{req.study!r} has no completed trial yet") from None
    run_id = best.user_attrs["run_id"]
    attacks = ",".join(load_profile(req.profile_path, req.base).eval.attacks)
    say(f"best trial {best.number} ({objective_text(best.value)}, {shown_params(best.params)}): run {run_id} on the "
        f"test split ({attacks})")
    out = subprocess.run([sys.executable, "-m", "fairtui.cli", "eval", run_id, "--attack", attacks,
                          "--checkpoint", "last", "--home", str(req.home)], text=True, capture_output=True)
    if out.returncode != 0:
        raise TuneError("finish", f"the test evaluation of run {run_id} exited {out.returncode}: "
                        f"{out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}")
    record = {"trial": best.number, "run_id": run_id, "value": best.value, "params": best.params,
              "attacks": attacks, "t": time.time()}
    try:
        study.set_user_attr("finished", record)
    except OSError as err:  # the evaluation is in the run's own stream; finish again records it (and reuses it)
        raise storage_error(err, study_path(req.home, req.study), f"run {run_id}'s test result is in its stream; "
                            f"`fairtui tune finish {req.study}` records it in the study") from None
    return record
