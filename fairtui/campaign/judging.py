"""`fairtui judge PROFILE --baseline LABEL`: train a method's runs for the baseline's seeds (and the baseline's
own seeds where it has no committed run), on the local queue's slots, and read the paired comparison as pairs land.

A judgement is identified by its **key**: the method's resolved profile up to the seed, the name and the thread
count, and the baseline's label. Its runs carry the tag ``judge:<key>`` and, in meta.json, ``judge = {key, role,
seed}``; its record, ``<home>/judges/<key>.json``, holds the order in which the pairs landed (the looks of the
sequential test). So the same command after Ctrl-C, a lost terminal or a reboot finds its runs again: a completed
seed is never trained again, a stopped or lost one resumes from its checkpoint, a queued one keeps its place.

With ``until_decided`` the seeds are taken in order, as many at once as the slots allow, and after each pair lands
the safe t-test (fairtui.judge.stats.sequential) decides whether the answer is known; once it is, the runs still
training are stopped (the same command resumes them if ever wanted) and nothing more is started."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from subprocess import SubprocessError
from typing import Callable

from engine.contract.config import profile_from_table
from engine.contract.profile_schema import ProfileError
from fairtui.campaign.driver import DriverLock
from fairtui.campaign.judgement import BASELINE, METHOD, TEACHER, Look, Side, Spec  # noqa: F401 (Side, Spec: here too)
from fairtui.judge import stats
from fairtui.judge.groups import compare_groups
from fairtui.launch.launcher import create_run
from fairtui.launch.queue import LocalQueue
from fairtui.runs.configurations import replicates_apart, seed_key
from fairtui.runs.runfolder import RunView
from fairtui.runs.store import RunIndex

RECORD_MAX_BYTES = 1 << 20  # a judgement's record holds its request and a seed list: far less than this


def valid_seeds(landed: list, seeds: list[int]) -> list[int]:
    """The record's landed seeds as the looks may read them: integers (never bools or floats) of this judgement,
    each once, in their order."""
    out: list[int] = []
    for s in landed:
        if type(s) is int and s in seeds and s not in out:
            out.append(s)
    return out
def slots(pool: list[str], threads: int) -> int:
    """Runs at once: on the CPU its cores // the runs' threads (at least one); on GPUs one a GPU."""
    if pool == ["cpu"]:
        cores = os.cpu_count() or 1
        return max(1, cores // max(1, threads or cores))
    return len(pool)


class Campaign:
    """One method's judgement against its baseline. In a family (fairtui.campaign.family) the baseline's runs are
    shared: ``baseline_key`` names them (tag ``judge:<baseline_key>``), ``shared`` holds them by seed for every member,
    and a member that ends stops only its own runs."""

    def __init__(self, home: Path, spec: Spec, queue: LocalQueue | None = None, baseline_key: str | None = None,
                 shared: dict[int, Path] | None = None):
        self.home, self.spec = home, spec
        self.baseline_key = baseline_key or spec.key
        self.shared = shared
        self.queue = queue or LocalQueue(home, worker=True)
        self.path = home / "judges" / f"{spec.key}.json"
        self.record = self._load()
        self.driver_lock = DriverLock(home / "judges" / f"{spec.key}.lock")
        if not self.path.exists():  # a new judgement's record: what was asked (the app's judge screen reopens it)
            self._save()
        threads = int((spec.method.table.get("train") or {}).get("threads") or 0)
        self.slots = slots(spec.pool, threads)
        self.failed: dict[int, str] = {}
        self.failed_roles: dict[int, str] = {}  # seed -> the side whose run failed (METHOD or BASELINE)
        self._runs: dict[tuple[str, int], Path] | None = None  # runs(): read from the index once

    # -- one driver ------------------------------------------------------------------------------------------

    def take_driver(self) -> bool:
        """Become the judgement's one driver (fairtui.campaign.driver); False when another process drives it, and
        then this one may look, never train. The driver alone writes the request into the record."""
        if self.driver_lock.held:
            return True
        if not self.driver_lock.take():
            return False
        if self.record.get("request") != self.spec.request:  # reopened with what was asked
            self.record["request"] = self.spec.request
            self._save()
        return True

    def busy_text(self) -> str:
        """The one line a second command on a driven judgement is refused with."""
        return self.driver_lock.busy_text(self.spec.key)

    # -- the record and the runs ------------------------------------------------------------------------------

    def _load(self) -> dict:
        """The judgement's record, checked: it is input (a file anyone may edit, copy or break). A folder in its place
        is refused (ValueError, one line); a record past RECORD_MAX_BYTES, unreadable, or not a record is rebuilt
        from the runs (its looks in the order the method runs ended); ``landed`` keeps only distinct integer seeds
        of this judgement, and a seed's pair is checked at every look (:meth:`step` drops one no longer landed)."""
        if self.path.is_dir():
            raise ValueError(f"{self.path} is a folder where the judgement's record should be: move it away and run "
                             "the same command (the record is rebuilt from the runs)")
        try:
            if self.path.stat().st_size <= RECORD_MAX_BYTES:
                record = json.loads(self.path.read_text())
                if isinstance(record, dict) and isinstance(record.get("landed"), list):
                    record["landed"] = valid_seeds(record["landed"], self.spec.seeds)
                    return record
        except (OSError, ValueError):
            pass
        return {"key": self.spec.key, "method": self.spec.method.label, "baseline": self.spec.baseline.label,
                "profile": self.spec.method.profile_path, "request": self.spec.request, "landed": [],
                "created": time.time()}

    def _save(self) -> None:
        from engine.contract.atomic import atomic_write_json

        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, self.record)

    def runs(self) -> dict[tuple[str, int], Path]:
        """The judgement's own runs by (role, seed): the newest of each (an older one failed and was replaced). The
        home's index is read once, at the first call; the runs made since are added as they are made (a step every
        second must not reconcile a home of thousands of runs), and a run deleted meanwhile drops out."""
        if self._runs is None:
            found: dict[tuple[str, int], tuple[float, Path]] = {}
            tag, base_tag = f"judge:{self.spec.key}", f"judge:{self.baseline_key}"
            for doc in RunIndex(self.home).read():
                tags = doc.get("tags") or []
                if tag not in tags and base_tag not in tags:
                    continue
                run_dir = self.home / "runs" / doc["run_id"]
                meta = RunView.load(run_dir).meta
                info = meta.get("judge") or {}
                key = (info.get("role"), info.get("seed"))
                own = tag in tags and (key[0] != BASELINE or base_tag == tag)  # a family's baseline is the shared one
                if not (own or (base_tag in tags and key[0] == BASELINE)):
                    continue
                if key not in found or meta.get("created", 0) > found[key][0]:
                    found[key] = (meta.get("created", 0), run_dir)
            self._runs = {k: v for k, (_, v) in found.items()}
            for (role, seed), run_dir in self._runs.items():
                if role == BASELINE and self.shared is not None:
                    self.shared.setdefault(seed, run_dir)
        if self.shared is not None:  # a family's baseline run of a seed, whichever member made it
            self._runs.update({(BASELINE, s): d for s, d in self.shared.items()})
        self._runs = {k: v for k, v in self._runs.items() if v.is_dir()}
        return dict(self._runs)

    def views(self, seed: int, runs: dict) -> tuple[RunView | None, RunView | None]:
        """The method's and the baseline's run of ``seed`` (the baseline's committed run first)."""
        method = RunView.load(runs[(METHOD, seed)]) if (METHOD, seed) in runs else None
        base = self.spec.baseline.committed.get(seed)
        if base is None and (BASELINE, seed) in runs:
            base = RunView.load(runs[(BASELINE, seed)])
        return method, base

    # -- starting ------------------------------------------------------------------------------------------

    def start(self, seed: int, runs: dict) -> list[str]:
        """Queue what seed ``seed`` still needs: a new run of each side without one, a resume of a stopped or lost
        one; the run ids queued."""
        from fairtui.launch.control import ControlError, check_resumable

        queued = []
        first = METHOD if self.teacher_ready(seed, runs) else TEACHER  # a student trains after its teacher
        roles = [first] + ([BASELINE] if seed not in self.spec.baseline.committed else [])
        for role in roles:
            from fairtui.launch.control import stranded

            run_dir = runs.get((role, seed))
            status = RunView.load(run_dir).status() if run_dir else None
            if status == "queued" and stranded(run_dir):  # queued, and no queue holds it: queued again
                self.queue.submit(run_dir, None, pool=self.spec.pool)
                queued.append(run_dir.name)
                continue
            if status in ("completed", "running", "queued") or status == "failed":
                continue
            if run_dir is not None:  # stopped or lost: it continues from its checkpoint
                try:
                    check_resumable(run_dir)
                except ControlError:
                    continue
            else:
                run_dir = self._create(role, seed)
            self.queue.submit(run_dir, None, pool=self.spec.pool)
            queued.append(run_dir.name)
        return queued

    def teacher_ready(self, seed: int, runs: dict) -> bool:
        """Whether seed's student may start: no teacher to train, a student run already made, or its teacher
        completed."""
        if self.spec.teacher is None or (METHOD, seed) in runs:
            return True
        run_dir = runs.get((TEACHER, seed))
        return run_dir is not None and RunView.load(run_dir).status() == "completed"

    def teacher_checkpoint(self, seed: int, runs: dict) -> str:
        """The checkpoint seed's student distils: its teacher run's headline checkpoint (the teacher profile's first
        of eval.checkpoints, the quick protocol's last), else the run folder (its best, else its last)."""
        run_dir = runs[(TEACHER, seed)]
        first = ((self.spec.teacher.table.get("eval") or {}).get("checkpoints") or ["best"])[0]
        path = run_dir / "checkpoints" / f"{first}.pt"
        return str(path if path.is_file() else run_dir)

    def _create(self, role: str, seed: int) -> Path:
        side = {METHOD: self.spec.method, BASELINE: self.spec.baseline, TEACHER: self.spec.teacher}[role]
        table = {**side.table, "seed": seed}
        if role == METHOD and self.spec.teacher is not None:
            table["method"] = {**table["method"], "teacher": self.teacher_checkpoint(seed, self.runs())}
        profile = profile_from_table(table, side.profile_path)
        key = self.baseline_key if role == BASELINE else self.spec.key
        run_dir = create_run(self.home, profile, side.profile_path, f"{side.stem or profile.name}-s{seed}",
                             [f"judge:{key}"], None, extra_meta={"judge": {"key": key, "role": role, "seed": seed}})
        RunIndex(self.home).register(run_dir)
        if self._runs is not None:  # the runs() cache: the new run joins it
            self._runs[(role, seed)] = run_dir
        if role == BASELINE and self.shared is not None:
            self.shared[seed] = run_dir
        return run_dir

    # -- reading ---------------------------------------------------------------------------------------------

    def state(self, seed: int, runs: dict) -> str:
        """"landed" (both sides completed), "failed" (a side failed: named in ``failed``), "training" (a side is
        queued or running), "stopped" (a side stopped or lost: the next start resumes it) or "new"."""
        from fairtui.launch.control import stranded

        method, base = self.views(seed, runs)
        sides = [(self.spec.method.label, method), (self.spec.baseline.label, base)]
        if method is None and self.spec.teacher is not None and (TEACHER, seed) in runs:  # the student waits for it
            sides[0] = (self.spec.teacher.label, RunView.load(runs[(TEACHER, seed)]))
        # a run marked queued that no queue holds (its engine stopped while it started, a Ctrl-C mid-start) waits
        # for nothing: it is taken as stopped, and the next start queues it again
        statuses = [("stopped" if v.status() == "queued" and stranded(v.run_dir) else v.status()) if v else None
                    for _, v in sides]
        if statuses[0] == "completed" and method is None:  # the teacher is in; its student is still to make
            statuses[0] = None
        if statuses == ["completed", "completed"]:
            return "landed"
        for role, (label, view), status in zip((METHOD, BASELINE), sides, statuses):
            if status == "failed":
                self.failed[seed] = f"{label} seed {seed} [{view.run_id}] failed"
                self.failed_roles[seed] = role
                return "failed"
        if any(s in ("queued", "running") for s in statuses):
            return "training"
        return "stopped" if any(s in ("stopped", "lost") for s in statuses) else "new"

    def landed_at(self, seed: int, runs: dict) -> float:
        """When seed's pair landed: the end of its method run (a committed baseline ended long before)."""
        method, _ = self.views(seed, runs)
        end = (method.finished or {}).get("t") if method is not None else None
        return float(end) if isinstance(end, (int, float)) else float("inf")

    def look(self, runs: dict, final: bool = False) -> Look:
        seeds = [s for s in self.record["landed"] if s in self.spec.seeds]
        if not seeds:
            return Look(None, [], stats.sequential([], len(self.spec.seeds), self.spec.alpha)
                        if self.spec.until_decided else None, final, self.spec.metric)
        method, base = [], []
        for seed in seeds:
            m, b = self.views(seed, runs)
            method.append(m)
            base.append(b)
        named = {self.spec.method.label: method, self.spec.baseline.label: base}
        cmp = compare_groups(named, self.spec.baseline.label, None, self.spec.checkpoint, 0, self.spec.bases,
                             allow_protocol_difference=self.spec.allow_protocol_difference, effect=self.spec.effect)
        look = Look(cmp, seeds, None, final, self.spec.metric)
        if self.spec.until_decided:
            look.sequential = stats.sequential(look.differences(), len(self.spec.seeds), self.spec.alpha)
        return look

    # -- the loop --------------------------------------------------------------------------------------------

    def step(self, on_look: Callable[[Look], None] = lambda look: None) -> tuple[Look, list[Path]]:
        """One look at the judgement, never waiting: record the pairs that landed (``on_look`` for each, in order),
        then either end it (the returned look is ``final``: every seed landed or failed, or the sequential test
        decided, and then the runs still training are stopped) or start what the slots allow. The look and the
        running runs. A judgement another process drives is only looked at: nothing is recorded or started."""
        runs = self.runs()
        if not self.take_driver():
            return self.look(runs), [d for d in runs.values() if RunView.load(d).status() == "running"]
        states = {s: self.state(s, runs) for s in self.spec.seeds}
        gone = [s for s in self.record["landed"] if states.get(s) != "landed"]  # a run removed or edited since
        if gone:
            self.record["landed"] = [s for s in self.record["landed"] if s not in gone]
            self._save()
        new = sorted((s for s in self.spec.seeds if states[s] == "landed" and s not in self.record["landed"]),
                     key=lambda s: self.landed_at(s, runs))
        if new:
            self.record["landed"] += new
            self._save()
            for i in range(len(new)):  # one look per pair, in the order recorded
                on_look(self._look_upto(runs, len(self.record["landed"]) - len(new) + i + 1))
        look = self.look(runs)
        done = all(states[s] in ("landed", "failed") for s in self.spec.seeds)
        if (look.sequential is not None and look.sequential.decided) or done:
            if not done:
                self.stop_rest(runs)
            look.final = True
            return look, []
        self._start_more(states, runs)
        self.queue.tick()
        return look, [d for d in runs.values() if RunView.load(d).status() == "running"]

    def run(self, on_tick: Callable[[list[Path]], None], on_look: Callable[[Look], None],
            interval: float = 1.0) -> Look:
        """:meth:`step` until the verdict, ``on_tick`` with the running runs between steps."""
        while True:
            look, running = self.step(on_look)
            if look.final:
                return look
            on_tick(running)
            time.sleep(interval)

    def _look_upto(self, runs: dict, n: int) -> Look:
        landed = self.record["landed"]
        self.record["landed"] = landed[:n]
        try:
            return self.look(runs)
        finally:
            self.record["landed"] = landed

    def _start_more(self, states: dict[int, str], runs: dict) -> None:
        """Fixed seeds: every seed at once (the queue runs them as the slots allow). Until decided: the next seeds
        in order while runs in flight fit the slots."""
        flight = sum(1 for d in runs.values() if RunView.load(d).status() in ("queued", "running"))
        for seed in self.spec.seeds:
            if states[seed] not in ("new", "stopped"):
                continue
            if self.spec.until_decided and flight >= self.slots:
                break
            flight += len(self.start(seed, runs))

    def stop_rest(self, runs: dict | None = None, everything: bool = False) -> list[str]:
        """Take the judgement's queued runs off the queue and stop its running ones after their batch (Ctrl-C, or a
        decision): each resumes with the same command. A family's shared baseline runs only with ``everything`` (the
        other members may still need them). The run ids stopped."""
        from fairtui.launch.control import StopError, stop_run, unqueue

        out = []
        for (role, _), run_dir in (runs or self.runs()).items():
            if role == BASELINE and self.shared is not None and not everything:
                continue
            view = RunView.load(run_dir)
            status, on_slurm = view.status(), view.meta.get("launcher") == "slurm"
            if status == "queued" and not on_slurm and unqueue(run_dir) is not None:
                out.append(run_dir.name)
                continue
            # running, or started as it was taken off the queue; a Slurm job queued or running (stop_run cancels it
            # in Slurm's queue, or asks its engine through the run folder: it reads stopped, as `fairtui stop` leaves it)
            if RunView.load(run_dir).status() == "running" or (on_slurm and status == "queued"):
                try:
                    stop_run(run_dir, wait=False)
                    out.append(run_dir.name)
                except (StopError, ProfileError, OSError, SubprocessError):  # ended meanwhile; scancel refused
                    pass
        return out


def committed_by_seed(views: list[RunView]) -> tuple[dict[int, RunView], list[str]]:
    """A baseline group's runs by seed (the first run of each seed: fairtui.runs.configurations.replicates_apart),
    and a line for each run set aside (a replicate, or a run without a seed, which nothing can pair)."""
    kept, aside = replicates_apart(views)
    aside += [f"{v.name} [{v.run_id}]: no seed" for v in kept if seed_key(v) is None]
    return {seed_key(v): v for v in kept if seed_key(v) is not None}, aside
