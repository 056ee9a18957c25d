"""Follow a running engine headless: a Rich progress display, one line per epoch, a table at the end.

Talk (progress, epoch lines) goes to stderr; the final table goes to stdout, or
with ``--json`` one JSON summary document and nothing else.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fairtui.runs.report import EPOCH_LEGEND, epoch_line, per_class_tables, run_summary
from fairtui.runs.runfolder import EventTail, LineTail, RunView
from fairtui.runs.runstate import autoattack_line, progress_line, run_eta_text
from fairtui.runs.usertext import inert

POLL_S = 0.2


def _progress_bar(console: Console) -> Progress:
    """Two rows: the run's epochs with the run's ETA (measured epoch times), and the current phase's
    batches with the phase's ETA (its rate since it began). Rich's own ETA needs updates within 30 s,
    which an epoch longer than that never gives, so both are computed here."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[eta]}"), console=console, transient=True)


def follow(run_dir: Path, proc: subprocess.Popen, json_out: bool = False,
           eval_request: dict | None = None, since: float = 0.0, said: list[str] | tuple = ()) -> int:
    """Show the run (or an evaluation of it) until its engine exits; return the engine's exit code.
    ``said``: the profile's warnings the command printed before the run started; the engine's log repeats
    them, and they are not printed twice.

    Ctrl-C is forwarded to the engine, which stops cleanly.
    """
    err = Console(stderr=True, highlight=False, soft_wrap=True)  # a log sent to a file keeps whole lines
    out = Console(highlight=False, soft_wrap=True)
    tail = EventTail(run_dir / "events.jsonl")
    stored = 0  # events in the stream before this evaluation: a result among them is a reused one
    if eval_request is not None:
        stored = len(tail.read_new())  # an evaluation shows only what it adds
    interrupted = {"n": 0}

    def on_sigint(signum: int, frame: Any) -> None:
        from engine.contract.protocol import STOP_MARKER
        from fairtui.runs.runfolder import engine_process

        interrupted["n"] += 1
        # The engine is in its own session: pass the Ctrl-C on, twice for a hard stop. While it starts (no signal
        # handler yet: its imports take seconds) the stop goes through the run folder, which it reads before
        # training: a Ctrl-C then would have killed it mid-import, with a traceback and a lost run.
        if interrupted["n"] > 1 or (engine_process(run_dir) or {}).get("signals"):
            proc.send_signal(signal.SIGINT)
        else:
            (run_dir / STOP_MARKER).touch()
        err.print("[yellow]stopping: the engine finishes its batch and keeps its last checkpoint[/]")

    previous = signal.signal(signal.SIGINT, on_sigint)
    bar = _progress_bar(err)
    epochs_task = bar.add_task("epochs", total=None, eta="")
    batch_task = bar.add_task("", total=None, eta="")
    class_names: list[str] = []
    epochs: list[dict] = []  # this run's epoch_end events, for the run's ETA
    warnings = LogWarnings(run_dir / "engine.log", said)
    estimated: list[str] = []  # the run's duration, said once from its first batches
    try:
        with bar:
            while True:
                done = proc.poll() is not None
                for line in warnings.read_new():
                    err.print(Text(line, style="yellow"))
                new = tail.read_new()
                for event in new:
                    class_names = _show_event(event, bar, epochs_task, err, class_names)
                epochs += [e for e in new if e.get("type") == "epoch_end"]
                if any(e.get("type") in ("run_started", "epoch_end", "run_finished") for e in new):
                    _update_index(run_dir)
                _show_progress(run_dir, bar, batch_task, since)
                if eval_request is None and not estimated:
                    line = first_estimate(run_dir, since)
                    if line:
                        err.print(line)
                        estimated.append(line)
                if eval_request is None:
                    total = bar.tasks[epochs_task].total
                    bar.update(epochs_task, eta=run_eta_text(epochs, int(total)) if total else "")
                if done:
                    break
                time.sleep(POLL_S)
    finally:
        signal.signal(signal.SIGINT, previous)
    code = proc.returncode
    _update_index(run_dir)
    view = RunView.load(run_dir)
    if eval_request is not None:
        return _eval_outcome(view, eval_request, code, json_out, out, err, stored)
    if json_out:
        out.print_json(json.dumps(run_summary(view, exit_code=code)))
    else:
        for table in per_class_tables(view):
            out.print(table)
        _show_outcome(view, code, err)
    return code


def _update_index(run_dir: Path) -> None:
    from fairtui.runs.store import RunIndex

    RunIndex(run_dir.parent.parent).register(run_dir)


class LogWarnings(LineTail):
    """The WARNING lines the engine adds to ``engine.log`` (AutoAttack's pre-flight checks among them)."""

    def __init__(self, path: Path, said: list[str] | tuple = ()):
        super().__init__(path, from_end=True)
        self.said = set(said)

    def read_new(self) -> list[str]:
        lines = [line.decode(errors="replace") for line in self.new_lines()]
        return [line for line in lines if " WARNING " in line
                and line.split(" WARNING ", 1)[1].strip() not in self.said]


def _show_event(event: dict, bar: Progress, task: Any, err: Console, names: list[str]) -> list[str]:
    kind = event.get("type")
    if kind == "run_started":
        names = event.get("class_names", [])
        cfg = event.get("config", {})
        bar.update(task, total=cfg.get("train", {}).get("epochs"))
        err.print(f"[bold]{inert(cfg.get('name', ''), markup=True)}[/]: {cfg.get('method', {}).get('name')} on "
                  f"{cfg.get('data', {}).get('dataset')} / {cfg.get('model', {}).get('arch')}, "
                  f"{event.get('num_classes')} classes, device {event.get('device')}, seed {event.get('seed')}")
        err.print(EPOCH_LEGEND, style="dim")
    elif kind == "run_resumed":
        bar.update(task, completed=event.get("epoch", 0))
        from engine.contract.protocol import resumed_text

        err.print(resumed_text(event))
    elif kind == "epoch_end":
        bar.update(task, completed=event["epoch"], total=event.get("epochs"))
        err.print(epoch_line(event, names))
    elif kind == "eval_result":
        err.print(f"test {event.get('attack')} @ {event.get('checkpoint')}: clean {event.get('avg_clean', 0):.3f} "
                  f"robust {event.get('avg_robust', 0):.3f} worst {event.get('worst_robust', 0):.3f}")
    return names


ESTIMATE_AFTER = 20  # training batches of this session before the run's duration is estimated


def first_estimate(run_dir: Path, since: float = 0.0) -> str | None:
    """Once this session has trained ESTIMATE_AFTER batches of an epoch (or a tenth of it, at least 3) over a
    second or more: the training's
    estimated duration at the rate so far, what is left of it, and that the test evaluation follows. None before."""
    try:
        p = json.loads((run_dir / "progress.json").read_text())
    except (OSError, ValueError):
        return None
    if p.get("phase") != "train" or float(p.get("t") or 0) < since:
        return None
    batch, batches, first = int(p.get("batch") or 0), int(p.get("batches") or 0), int(p.get("first_batch") or 0)
    done = batch - first
    if not batches or done < min(ESTIMATE_AFTER, max(3, batches // 10)) or not p.get("started"):
        return None
    elapsed = float(p["t"]) - float(p["started"])
    if elapsed < 1.0:  # too short a span to time
        return None
    per_batch = elapsed / done
    view = RunView.load(run_dir)
    epochs = int((view.config.get("train") or {}).get("epochs") or 0)
    epoch = int(p.get("epoch") or 1)
    left = per_batch * ((batches - batch) + batches * max(0, epochs - epoch))
    from fairtui.runs.runstate import format_seconds

    return (f"estimated: {format_seconds(left)} of training left ({epochs - epoch + 1} epochs of {batches} batches "
            f"at {per_batch:.2f} s a batch, the rate of its first {done}; validation and the test evaluation "
            "come on top, and a busier machine is slower)")


def _show_progress(run_dir: Path, bar: Progress, task: Any, since: float = 0.0) -> None:
    """The phase's bar from ``progress.json``; one written before ``since`` (an earlier phase's, left in
    the folder) is not shown as current."""
    try:
        p = json.loads((run_dir / "progress.json").read_text())
    except (OSError, ValueError):
        return
    if float(p.get("t") or 0) < since:
        bar.update(task, visible=False)
        return
    if p.get("aa"):
        bar.update(task, description="  " + autoattack_line(p), completed=p.get("batch", 0),
                   total=p.get("batches") or None, visible=True, eta="")
        return
    phase = p.get("phase")
    if phase == "done":
        bar.update(task, visible=False)
        return
    label = {"train": f"  train (epoch {p.get('epoch')})", "val": f"  validate (epoch {p.get('epoch')})",
             "test": f"  test {p.get('attack', '')}", "eval": f"  {p.get('attack', '')} batches"}.get(phase, "")
    text, _ = progress_line(p)
    eta = text[text.index("ETA"):] if "ETA" in text else ""
    bar.update(task, description=label, completed=p.get("batch", 0), total=p.get("batches") or None, visible=True,
               eta=eta)


def _show_outcome(view: RunView, code: int, err: Console) -> None:
    fin = view.finished or {}
    status = fin.get("status", "lost")
    if status == "completed":
        err.print(f"[green]completed[/] run {view.run_id} ({view.run_dir})")
    else:
        err.print(f"[red]{status}[/] run {view.run_id}: {fin.get('error', 'the engine exited with code %s' % code)}")
        if status == "stopped":
            err.print(f"continue it with: fairtui resume {view.run_id}")
        else:
            err.print(f"engine log: {view.run_dir / 'engine.log'}")


def requested_results(view: RunView, req: dict) -> dict[tuple[str, str, str], dict]:
    """The run's latest result of each attack of an evaluation request at exactly the requested setting
    (split, checkpoint, eps, subset, batching, seed): what the engine reuses unless the request forces."""
    from engine.contract.results import recorded_matches, requested_setting

    results = {}
    cfg = view.config
    for e in view.eval_results():
        attack = e.get("attack")
        if attack in req["attacks"] and e.get("split") == req["split"] and e.get("checkpoint") == req["checkpoint"] \
                and recorded_matches(e.get("setting") or {}, requested_setting(cfg, attack, req.get("eps"),
                                                                              req.get("n_per_class", 0),
                                                                              req.get("batch_size", 0),
                                                                              req.get("seed"))):
            results[(req["split"], req["checkpoint"], attack)] = e
    return results


def _eval_outcome(view: RunView, req: dict, code: int, json_out: bool, out: Console, err: Console,
                  stored: int = 0) -> int:
    from fairtui.runs.report import result_rows

    results = requested_results(view, req)
    reused = [key[2] for key, e in results.items() if int(e.get("seq", stored)) < stored]
    if json_out:
        out.print_json(json.dumps({"run_id": view.run_id, "exit_code": code, "class_names": view.class_names(),
                                   "results": result_rows(results.values()), "reused": reused}))
        return code
    for attack in reused:
        e = results[(req["split"], req["checkpoint"], attack)]
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["t"])) if e.get("t") else "earlier"
        err.print(f"{attack} @ {req['checkpoint']}: reused the stored result (measured {when}); --force recomputes",
                  soft_wrap=True)
    for table in per_class_tables(view, results=results):
        out.print(table)
    if code == 130:
        err.print("[yellow]stopped[/]: finished batches are kept; run the same command again to continue")
    elif code not in (0, 2):  # for 2 the caller prints the engine's one-line reason
        err.print(f"[red]evaluation failed[/] (exit {code}); see {view.run_dir / 'engine.log'}")
    return code
