"""A run's live state, built event by event: what the run screen shows. No Textual, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field


from engine.contract import metrics
from fairtui.runs.runfolder import headline_results


# Per-class validation accuracies over epochs, plotted like a method's class-wise state.
ACCURACY_KEYS = {"val robust accuracy": "robust_acc_per_class", "val clean accuracy": "clean_acc_per_class"}


@dataclass
class RunState:
    run_id: str = ""
    class_names: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    epochs: list[dict] = field(default_factory=list)  # the latest epoch_end of each epoch, in order
    results: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    status: str = "starting"
    error: str | None = None
    total_epochs: int = 0
    imported: dict | None = None  # where an imported model came from (`fairtui import`): it never trains
    teacher: dict | None = None  # a distillation's teacher, as the engine recorded it (run, checkpoint, digest)

    def ingest(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "run_started":
            self.run_id = event.get("run_id", self.run_id)
            self.class_names = list(event.get("class_names", []))
            self.config = event.get("config", {})
            self.total_epochs = int(self.config.get("train", {}).get("epochs", 0))
            self.imported = event.get("imported")
            self.teacher = event.get("teacher")
            self.status = "running"
        elif kind == "run_resumed":
            self.status, self.error = "running", None
        elif kind == "epoch_end":
            if self.epochs and self.epochs[-1]["epoch"] >= event["epoch"]:  # a resume repeats epochs
                self.epochs = [e for e in self.epochs if e["epoch"] < event["epoch"]]
            self.epochs.append(event)
            self.total_epochs = event.get("epochs", self.total_epochs)
        elif kind == "eval_result":
            self.results.update(headline_results([event], self.config))
        elif kind == "run_finished":
            self.status, self.error = event.get("status", "failed"), event.get("error")
            if self.imported is not None and self.status == "completed":
                self.status = "imported"

    @property
    def names(self) -> list[str]:
        if self.class_names:
            return self.class_names
        k = len(self.epochs[-1]["val"]["robust_acc_per_class"]) if self.epochs else 0
        return [str(i) for i in range(k)]

    def latest_bars(self) -> tuple[list[float | None], list[float | None], str]:
        """Validation clean and robust accuracy per class at the latest epoch; for a run without
        epochs (an imported model), its first robust test result."""
        if not self.epochs:
            robust = [(key, r) for key, r in self.results.items() if key[2] != "clean"]
            if robust:
                (split, ckpt, attack), r = robust[0]
                return r["clean_acc_per_class"], r["robust_acc_per_class"], f"{split} {attack} @ {ckpt}"
            return [], [], "validation accuracy per class"
        last = self.epochs[-1]
        val = last.get("val", {})
        return (val.get("clean_acc_per_class", []), val.get("robust_acc_per_class", []),
                f"val, epoch {last['epoch']}/{self.total_epochs}")

    def summary(self) -> dict[str, float]:
        _, robust, _ = self.latest_bars()
        return metrics.summary(robust) if robust else {}

    def state_keys(self) -> list[str]:
        """What the run screen can plot per class over epochs: validation robust and clean accuracy, then
        the method_state keys that hold one value per class (or K + 1 for WAT), in first-seen order."""
        keys: list[str] = list(ACCURACY_KEYS) if self.epochs else []
        k = len(self.names)
        for e in self.epochs:
            for key, value in (e.get("method_state") or {}).items():
                if isinstance(value, list) and len(value) in (k, k + 1) and key not in keys \
                        and all(isinstance(v, (int, float)) or v is None for v in value):
                    keys.append(key)
        return keys

    def trajectory(self, key: str) -> tuple[list[int], list[list[float | None]], list[str]]:
        """Epochs and one series per class of ``method_state[key]`` (WAT's K + 1: 'overall' first)."""
        if key in ACCURACY_KEYS:
            rows = [(e["epoch"], (e.get("val") or {}).get(ACCURACY_KEYS[key])) for e in self.epochs]
        else:
            rows = [(e["epoch"], (e.get("method_state") or {}).get(key)) for e in self.epochs]
        rows = [(ep, v) for ep, v in rows if isinstance(v, list)]
        if not rows:
            return [], [], []
        width = max(len(v) for _, v in rows)
        labels = list(self.names)
        if width == len(labels) + 1:
            labels = ["overall"] + labels
        series = [[v[i] if i < len(v) else None for _, v in rows] for i in range(width)]
        return [ep for ep, _ in rows], series, labels[:width]

    def log_line(self, event: dict) -> str | None:
        from fairtui.runs.report import epoch_line

        kind = event.get("type")
        if kind == "epoch_end":
            return epoch_line(event, self.names)
        if kind == "run_started":
            from fairtui.runs.report import EPOCH_LEGEND

            return f"started on {event.get('device')}, seed {event.get('seed')}\n{EPOCH_LEGEND}"
        if kind == "run_resumed":
            from engine.contract.protocol import resumed_text

            return resumed_text(event)
        if kind == "eval_result":
            head = f"{event.get('split')} {event.get('attack')} @ {event.get('checkpoint')}: "
            if event.get("attack") == "clean":  # no attack: there is no robust number to show
                worst = min((a for a in event.get("clean_acc_per_class") or [] if a is not None), default=None)
                return head + f"clean {event.get('avg_clean') or 0:.3f}" + \
                    (f" worst class {worst:.3f}" if worst is not None else "")
            return head + (f"clean {event.get('avg_clean') or 0:.3f} robust {event.get('avg_robust') or 0:.3f} "
                           f"worst {event.get('worst_robust') or 0:.3f}")
        if kind == "run_finished":
            return f"finished: {event.get('status')}" + (f" ({event['error']})" if event.get("error") else "")
        return None


def inert_id(run_id) -> str:
    from fairtui.runs.usertext import inert

    return inert(str(run_id))


def teacher_text(record: dict | None) -> str | None:
    """"taught by run ID's best checkpoint (epoch 6; cifar10-cpu-quick-teacher, preact_resnet18 width 16, seed 0);
    sha256 ..." for a distillation's teacher as the engine recorded it; None without one."""
    if not record:
        return None
    from fairtui.runs.usertext import inert

    arch = str(record.get("arch"))
    if record.get("base_width") and "resnet" in arch and "wide" not in arch:  # the widths a profile sets
        arch += f" width {record['base_width']}"
    what = ", ".join(str(x) for x in (inert(str(record.get("profile") or "?")), arch,
                                      f"seed {record.get('seed')}") if x)
    return (f"taught by run {inert(str(record.get('run_id')))}'s {record.get('checkpoint')} checkpoint (epoch "
            f"{record.get('epoch')}; {what}); sha256 {str(record.get('sha256'))[:16]}...")


def describe_summary(state: RunState) -> str:
    s = state.summary()
    head = f"{state.status}"
    if state.error:
        head += f": {state.error}"
    if state.teacher:
        head += f" | teacher {inert_id(state.teacher.get('run_id'))}"
    if not s:
        return head
    return (f"{head} | val robust avg {s['avg']:.3f}  worst {s['worst']:.3f}  CV {s['cv']:.4f}  "
            f"MCD {s['mcd']:.3f}")


def result_lines(state: RunState) -> list[str]:
    out = []
    for (split, ckpt, attack), r in state.results.items():
        if attack == "clean":  # a clean evaluation has no robust number: its accuracy is the clean one
            out.append(f"{split} {attack:>8} @ {ckpt:<5} clean {r.get('avg_clean', 0):.3f}  worst class "
                       f"{min(r.get('clean_acc_per_class') or [0]):.3f}")
            continue
        out.append(f"{split} {attack:>8} @ {ckpt:<5} clean {r.get('avg_clean', 0):.3f}  robust "
                   f"{r.get('avg_robust', 0):.3f}  worst {r.get('worst_robust', 0):.3f}  CV {r.get('cv', 0):.4f}")
    return out




def _phase(p: dict, now: float | None = None) -> tuple[str, int, int, str, str] | None:
    """``progress.json``'s phase: what it is, batch, batches, its ETA ("ETA 42 s", or "" before the first
    batch) and how stale the file is ("" when fresh). None when no phase runs."""
    import time

    phase, batch, batches = p.get("phase"), int(p.get("batch") or 0), int(p.get("batches") or 0)
    if phase in (None, "done") or not batches:
        return None
    what = {"train": f"train epoch {p.get('epoch')}", "val": f"validate epoch {p.get('epoch')}",
            "prepare": f"prepare epoch {p.get('epoch')}",
            "test": f"test {p.get('attack', '')}", "eval": f"evaluate {p.get('attack', '')}"}.get(phase, phase)
    eta = stale = ""
    started, t = p.get("started"), p.get("t")
    first = int(p.get("first_batch") or 0)  # a resumed epoch began at its kept batches: those took no time here
    if batch > first and started is not None and t and t > started:
        left = (t - started) / (batch - first) * (batches - batch)
        age = max(0.0, (now or time.time()) - t)
        eta = f"ETA {format_seconds(max(0.0, left - age))}"
        if age > 120:
            stale = f"no update for {format_seconds(age)}"
    return what, batch, batches, eta, stale


def progress_line(p: dict, now: float | None = None) -> tuple[str, float | None]:
    """``progress.json`` as one line ("train epoch 3: 120/391 batches, 31%, ETA 42 s") and the fraction done.

    The ETA is the phase's rate so far (batches since ``started``); no ETA before the first batch.
    """
    phase = _phase(p, now)
    if phase is None:
        return "", None
    what, batch, batches, eta, stale = phase
    fraction = min(1.0, batch / batches)
    if p.get("aa"):
        return autoattack_line(p), fraction
    text = f"{what}: {batch}/{batches} batches, {fraction:.0%}" + (f", {eta}" if eta else "")
    return text + (f" ({stale})" if stale else ""), fraction


def progress_brief(p: dict, now: float | None = None) -> str:
    """The phase in a few words, its ETA first, for a line that also names the run (a sweep's child at
    80 columns): "ETA 42 s, train epoch 3 31%"."""
    phase = _phase(p, now)
    if phase is None:
        return ""
    what, batch, batches, eta, stale = phase
    text = f"{what} {min(1.0, batch / batches):.0%}"
    text = f"{eta}, {text}" if eta else text
    return text + (f" ({stale})" if stale else "")


def progress_header(p: dict, epochs: list[dict], total_epochs: int, now: float | None = None) -> tuple[str, float | None]:
    """The run screen's progress line, short enough for the space an 80-column screen leaves beside its bar: while
    training, the run's time left first, then the phase's batches and time left: "run 1 h 05 min + test · train
    epoch 2: 18/313, 12 min" (it said "run ETA 1 h 05 min + test evaluation | train epoch 2:", cut there, #73)."""
    text, fraction = progress_line(p, now)
    phase = _phase(p, now)
    if fraction is None or phase is None or p.get("phase") not in ("train", "val") or p.get("aa"):
        return text, fraction
    what, batch, batches, eta, stale = phase
    left = run_eta(epochs, total_epochs, now)
    if left is None:
        run = "run: after the first epoch"
    elif left == 0 and epochs and epochs[-1]["epoch"] >= total_epochs:
        run = "training done"
    else:
        run = f"run {format_seconds(left)} + test"
    part = f"{what}: {batch}/{batches}" + (f", {eta.removeprefix('ETA ')}" if eta else "")
    return f"{run} · {part}" + (f" ({stale})" if stale else ""), fraction


def autoattack_line(p: dict) -> str:
    """Where an AutoAttack evaluation is inside its batch, the ETA first (80 columns cut the end of the
    line): "aa ETA 3 min 10 s | batch 1/1: apgd-t (2/4); 61/100 robust after apgd-ce" (the ETA from the
    measured rate of the attacks done)."""
    aa = p["aa"]
    attacks, done = aa.get("attacks") or [], aa.get("done") or []
    head = f"batch {p.get('batch_in', int(p.get('batch') or 0) + 1)}/{p.get('batches')}"
    current = aa.get("current")
    step = (f"{current} ({attacks.index(current) + 1}/{len(attacks)})" if current in attacks
            else f"{len(done)}/{len(attacks)} attacks done")
    robust = f"{aa.get('robust')}/{aa.get('n')} robust" if aa.get("robust") is not None else ""
    if done:
        robust += f" after {done[-1]['attack']}"
    eta = aa.get("eta_s")
    unmeasured = [a for a in aa.get("unmeasured") or [] if a != current]
    when = (f"ETA {format_seconds(eta)}" if eta is not None else
            f"ETA after {attacks[0]}" if attacks else "")
    if eta is not None and unmeasured:  # another kind of attack still to run: its speed is not known yet
        when += f" + {', '.join(unmeasured)} (not timed yet)"
    more = int(p.get("batches") or 0) - int(p.get("batch_in") or 0)
    if more > 0:
        when += f" (this batch; {more} more)"
    where = "; ".join(x for x in (f"{head}: {step}", robust) if x)
    return f"{p.get('attack', 'aa')} {when} | {where}" if when else f"{p.get('attack', 'aa')} {where}"


RECENT_EPOCHS = 5  # the run ETA uses the mean time of the latest epochs (FRL's phases differ in speed)


def run_eta(epochs: list[dict], total_epochs: int, now: float | None = None) -> float | None:
    """Seconds until training ends: the epochs left times the mean of the latest measured epoch times,
    less what the current epoch has run since the last `epoch_end` (its ``t``), at most one mean epoch: an
    epoch slower than the mean, or a stop and resume since the last epoch, does not count the estimate down
    to 0 with epochs left. None before the first epoch ends. The test evaluation after training comes on top
    (it is not measured until it runs)."""
    import time

    times = [e.get("time_s") for e in epochs if e.get("time_s")]
    if not times:
        return None
    recent = times[-RECENT_EPOCHS:]
    done = epochs[-1]["epoch"]
    mean = sum(recent) / len(recent)
    left = max(0, total_epochs - done) * mean
    since = (now or time.time()) - epochs[-1].get("t", now or time.time())
    return max(0.0, left - min(mean, max(0.0, since))) if left else 0.0


def run_eta_text(epochs: list[dict], total_epochs: int, now: float | None = None) -> str:
    """"run ETA 12 min + test evaluation" (or why there is none yet)."""
    eta = run_eta(epochs, total_epochs, now)
    if eta is None:
        return "run ETA after the first epoch"
    if eta == 0 and epochs and epochs[-1]["epoch"] >= total_epochs:
        return "training done; test evaluation"
    return f"run ETA {format_seconds(eta)} + test evaluation"


def format_seconds(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"

