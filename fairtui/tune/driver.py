"""The driver of a `fairtui tune` study (:class:`Driver`) and its end (:func:`finish`).

The driver runs a study's trials to its budget: it asks Optuna for a trial, makes the trial's run and starts it
through the local queue (or as a Slurm job), reports each epoch's validation objective to the pruner, stops a
pruned run, and tells Optuna how each trial ended. It adopts what a crashed or stopped driver left (``--resume``),
holds trials whose runs ended for the machine's reasons, and takes a stop only between its steps. :func:`finish`
evaluates the best trial's run on the test split, once. The study itself (its storage, request, sampler and
pruner) is :mod:`fairtui.tune.study`'s.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Callable

from fairtui.tune.study import Request, optuna, storage_error, study_path
from fairtui.tune.space import TuneError, override
from fairtui.tune.trials import DRIVER_STOPPED, machine_reason, objective_text, shown_params, unmark_stopped


class Driver:
    """Runs a study's trials to its budget: asks Optuna, starts runs through the queue, reports each epoch,
    prunes, and tells Optuna how each trial ended."""

    def __init__(self, study, req: Request, say: Callable[[str], None] = lambda line: None):
        from fairtui.launch.queue import LocalQueue

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
        from fairtui.launch.launcher import GpuChoice, create_run

        params = {d.key: d.suggest(trial) for d in self.req.space}
        sets = [*self.req.base, *(override(k, v) for k, v in params.items()), "eval.test_at_end=false"]
        profile = load_profile(self.req.profile_path, sets)
        self._check_start(trial, profile)
        gpus = GpuChoice.parse(self.req.gpus)
        run_dir = create_run(self.req.home, profile, self.req.profile_path, f"{self.req.study}-t{trial.number}",
                             [f"study:{self.req.study}", f"trial:{trial.number}"], gpus,
                             extra_meta={"study": self.req.study, "trial": trial.number, "params": params})
        trial.set_user_attr("run_id", run_dir.name)
        self._launch(run_dir)
        self.active[trial.number] = {"trial": trial, "run_id": run_dir.name, "reported": 0}
        self.say(f"trial {trial.number}: run {run_dir.name} {shown_params(params)}")

    def _check_start(self, trial, profile) -> None:
        """A fine-tune's trials start from ``method.init_from``: where it is gone (the base run deleted), every trial
        would fail on it and spend the budget. The study stops with one line instead; this trial does not count."""
        from engine.contract.profile_schema import ProfileError
        from fairtui.launch.launcher import resolve_init_from

        try:
            resolve_init_from(profile, self.req.profile_path, self.req.home)
        except ProfileError as err:
            trial.set_user_attr("no_run", True)
            self.study.tell(trial.number, state=optuna().trial.TrialState.FAIL)
            raise TuneError("STUDY", f"{self.req.study}: stopped before trial {trial.number}, whose start is gone "
                            f"({err.problem}): every trial would fail on it. None of the budget was spent on it; "
                            f"restore the run and `fairtui tune {self.req.study} --resume`") from None

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
        from fairtui.runs.runfolder import RunView

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

    def _take_back_lost(self) -> None:
        """Runs of this study that its journal does not name: the journal lost their trials (cut, or restored from
        an older copy). A run that ended is taken back as a trial with its parameters and its result, so that the
        budget counts it and its configuration is not trained again; one that did not end is tagged ``orphan`` and
        named, left as it is and not counted (`fairtui resume` or `rm` is the user's choice)."""
        from fairtui.launch.launcher import change_meta
        from fairtui.runs.runfolder import RunView

        opt = optuna()
        TrialState, create_trial = opt.trial.TrialState, opt.trial.create_trial
        known = {t.user_attrs.get("run_id") for t in self.study.get_trials(deepcopy=False)}
        dims = {d.key: d for d in self.req.space}
        runs = self.req.home / "runs"
        for meta_path in sorted(runs.glob("*/meta.json")) if runs.is_dir() else []:
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            run_id = meta_path.parent.name
            if meta.get("study") != self.req.study or run_id in known or "orphan" in (meta.get("tags") or []):
                continue
            view = RunView.load(meta_path.parent)
            status, params, pruned = view.status(), meta.get("params") or {}, "pruned" in (meta.get("tags") or [])
            try:
                distributions = {k: dims[k].distribution(opt) for k in params}
                values = [self.req.objective.value(e) for e in view.epochs]
                steps = {e["epoch"]: v for e, v in zip(view.epochs, values) if v is not None}
                if status == "completed" and values and values[-1] is not None:
                    state, value = TrialState.COMPLETE, values[-1]
                elif status in ("failed", "completed") or pruned:
                    state, value = (TrialState.PRUNED if pruned else TrialState.FAIL), None
                else:
                    raise ValueError(f"it did not end ({status})")
                frozen = create_trial(params=params, distributions=distributions, state=state, value=value,
                                      intermediate_values=steps, user_attrs={"run_id": run_id, "taken_back": True})
            except (KeyError, ValueError) as err:
                change_meta(meta_path.parent, lambda m: m.update(tags=[*m.get("tags", []), "orphan"]))
                self.say(f"run {run_id} (trial {meta.get('trial')} of {self.req.study}) is not in the study's journal "
                         f"and is not counted: {err}; tagged orphan, left as it is")
                continue
            self.study.add_trial(frozen)
            self.say(f"run {run_id} (trial {meta.get('trial')}, lost from the study's journal) taken back as a "
                     f"{frozen.state.name.lower()} trial: its configuration is not trained again")

    def _launch(self, run_dir: Path) -> None:
        """Start (or continue) a trial's run: through the local queue, on any one of ``--gpus`` (or the CPU),
        or as a Slurm job of its own (``--launcher slurm``)."""
        settings = self.req.slurm_settings()
        if settings is not None:
            from engine.contract.profile_schema import ProfileError
            from fairtui.launch.slurm import submit_run

            try:
                submit_run(self.req.home, run_dir, settings)
            except ProfileError as err:  # sbatch refused it: the run says failed, and _follow records the trial
                self.say(f"run {run_dir.name}: {err}")
            return
        from fairtui.launch.launcher import GpuChoice

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
        from fairtui.runs.runfolder import RunView

        opt = optuna()
        entry = self.active[number]
        run_dir = self.req.home / "runs" / entry["run_id"]
        view = RunView.load(run_dir)
        # the status with the events it was read with: reporting can wait on the study's lock (seconds), after
        # which a fresh liveness check against these events would call a run that finished meanwhile lost
        status = view.status()
        trial = entry["trial"]
        if self._report_epochs(number, entry, view, status):
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

    def _report_epochs(self, number: int, entry: dict, view, status: str) -> bool:
        """Report the run's new epochs to its trial; True when the pruner stopped it (the run is stopped, tagged
        ``pruned`` and the trial told)."""
        from fairtui.launch.launcher import change_meta

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
                from fairtui.launch.control import StopError, stop_run

                change_meta(view.run_dir, lambda m: m.update(tags=[*m.get("tags", []), "pruned"], pruned=True))
                try:
                    stop_run(view.run_dir, wait=False)
                except StopError:
                    pass
                self.study.tell(number, state=optuna().trial.TrialState.PRUNED)
                self.say(f"trial {number}: pruned after epoch {event['epoch']} ({objective_text(value)})")
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
            self._take_back_lost()
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
        from fairtui.launch.control import StopError, stop_run
        from fairtui.launch.launcher import change_meta

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
    out = subprocess.run([sys.executable, "-m", "fairtui", "eval", run_id, "--attack", attacks,
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
