"""What the runs and run screens do for stops, notes, tags, evaluations, exports and deletions: the command line's
own paths."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from textual.screen import Screen


def stop_or_kill(screen: Screen, run_dir: Path) -> None:
    """`s`: ask the engine to stop; when it was asked before and still runs (it hangs), offer to kill it
    (SIGKILL, as `fairtui stop --now`), after a confirmation."""
    from fairtui.app.dialogs import ConfirmDialog
    from fairtui.launch.control import StopError, kill_run, stop_requested, stop_run

    def kill(yes: bool | None) -> None:
        if not yes:
            return
        try:
            screen.notify(f"run {run_dir.name}: {kill_run(run_dir)}; resume continues from its last checkpoint")
        except StopError as err:
            screen.notify(str(err), severity="warning")

    if stop_requested(run_dir):
        screen.app.push_screen(ConfirmDialog(f"run {run_dir.name} was asked to stop and still runs: kill its engine "
                                             "now (SIGKILL)? It keeps its last checkpoint."), kill)
        return
    try:
        status = stop_run(run_dir, wait=False)
        if status == "stopping":
            screen.notify(f"stopping {run_dir.name}: it finishes its batch and keeps its checkpoint (s again: kill it)")
        else:  # a queued run left the queue, or a Slurm job was cancelled
            screen.notify(f"run {run_dir.name}: {status}")
    except StopError as err:
        screen.notify(str(err), severity="warning")


def edit_notes(screen: Screen, run_dir: Path) -> None:
    """Read or write the run's notes in a dialog (meta.json under its lock, as `fairtui note`)."""
    from fairtui.app.dialogs import NotesDialog
    from fairtui.runs.runfolder import RunView
    from fairtui.runs.usertext import inert

    view = RunView.load(run_dir)

    def save(text: str | None) -> None:
        if text is None:
            return
        from fairtui.launch.control import update_meta
        from fairtui.runs.home import ReadOnlyHome
        from fairtui.runs.usertext import UserTextError, check_note

        try:
            check_note(text)
            update_meta(run_dir, lambda meta: meta.__setitem__("notes", text))
        except (OSError, ReadOnlyHome, UserTextError) as err:
            screen.notify(f"notes not saved: {err}", severity="error", markup=False)
            return
        screen.notify(f"notes of {inert(view.name)} saved", markup=False)

    screen.app.push_screen(NotesDialog(inert(view.name), view.meta.get("notes") or ""), save)


def edit_tags(screen: Screen, run_dir: Path, tags: list[str], saved: Callable[[], None]) -> None:
    """Edit the run's own tags in a dialog; ``saved`` is called once meta.json holds them. A sweep's or a
    study's own tags (sweep:ID and its grid values, study:NAME and trial:N) link its runs: kept, not edited."""
    from fairtui.app.dialogs import TextDialog

    kept = [t for t in tags if t.startswith(("sweep:", "study:", "trial:")) or "=" in t]
    own = [t for t in tags if t not in kept]

    def apply(text: str | None) -> None:
        if text is None:
            return
        from fairtui.launch.control import update_meta
        from fairtui.runs.usertext import UserTextError, check_tag

        try:
            for t in text.split():
                check_tag(t)
        except UserTextError as err:
            screen.notify(f"tags not saved: {err}", severity="error", markup=False)
            return
        update_meta(run_dir, lambda m: m.__setitem__("tags", kept + [t for t in text.split() if t not in kept]))
        saved()

    prompt = "tags (space-separated)" + (f"; kept: {' '.join(kept)}" if kept else "")
    screen.app.push_screen(TextDialog(prompt, " ".join(own)), apply)


def delete(screen: Screen, run_dir: Path, name: str, deleted: Callable[[], None]) -> None:
    """Delete the run and its folder after a confirmation (not while it runs); ``deleted`` is called after."""
    from fairtui.app.dialogs import ConfirmDialog

    def apply(yes: bool | None) -> None:
        if not yes:
            return
        from fairtui.launch.control import ControlError, delete_run

        try:
            screen.notify(delete_run(run_dir))
        except ControlError as err:
            screen.notify(f"{err} (s stops it)" if "running" in str(err) else str(err), severity="warning")
            return
        deleted()

    from fairtui.launch.control import dependents

    needed = dependents(run_dir)
    warned = f" It is the start of: {'; '.join(needed)}; they would fail." if needed else ""
    screen.app.push_screen(ConfirmDialog(f"delete run {name} [{run_dir.name}] and its folder?{warned}"), apply)


def evaluate(screen: Screen, run_dir: Path) -> None:
    """Ask what to evaluate, then start the engine as `fairtui eval` does; progress on the run screen."""
    from fairtui.app.dialogs import EvalDialog
    from fairtui.runs.runfolder import RunView

    view = RunView.load(run_dir)
    if view.status() in ("running", "queued"):
        screen.notify(f"{view.name} is {view.status()}: evaluate it when it has finished", severity="warning")
        return
    checkpoints = view.checkpoint_names() or ["best", "last"]  # read without torch (checkpoints/names.json)
    order = ["best", "last", "ema", "fawa"]
    checkpoints = sorted(checkpoints, key=lambda c: order.index(c) if c in order else len(order))

    def start(request: dict | None) -> None:
        if request is None:
            return
        from engine.contract.protocol import engine_command
        from fairtui.launch.follow import requested_results
        from fairtui.launch.launcher import GpuChoice, start_engine

        command = engine_command("eval", run_dir, "--request", json.dumps(request))
        try:
            start_engine(run_dir, GpuChoice.parse(view.meta.get("gpus")), command=command)
        except OSError as err:
            screen.notify(f"could not start the evaluation: {err}", severity="error")
            return
        stored = {} if request.get("force") else requested_results(view, request)
        for (_, checkpoint, attack), result in stored.items():
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(result["t"])) if result.get("t") else "earlier"
            screen.notify(f"{attack} @ {checkpoint}: the stored result (measured {when}) is reused, not measured "
                          "again (fairtui eval --force recomputes it)")
        fresh = [a for a in request["attacks"] if (request["split"], request["checkpoint"], a) not in stored]
        if fresh:
            screen.notify(f"evaluating {view.name}: {', '.join(fresh)} @ {request['checkpoint']} "
                          "(progress on its run screen; results join its table)")

    norm = (view.config.get("attack") or {}).get("norm", "linf")
    screen.app.push_screen(EvalDialog(view.name, checkpoints, norm), start)


def export(screen: Screen, run_dirs: list[Path]) -> None:
    """Write the runs' summary table (`fairtui export`), a figure (`fairtui plot`) or TensorBoard event files
    (`fairtui export --format tensorboard`) and say where; figures and TensorBoard are drawn off the event
    loop."""
    from fairtui.app.dialogs import ExportDialog

    default = str(Path.cwd() / f"fairtui-export-{time.strftime('%Y%m%d-%H%M%S')}.md")

    def write(choice: tuple[str, str] | None) -> None:
        if choice is None:
            return
        fmt, path = choice
        from fairtui.app.dialogs import export_path

        target = Path(export_path(path, fmt)).expanduser()
        if fmt.startswith("figure:") or fmt == "tensorboard":
            screen.notify(f"writing {target.name} ...")
            screen.run_worker(lambda: _write_in_thread(screen, run_dirs, fmt, target), thread=True,
                              group="export", exit_on_error=False)
            return
        from fairtui.judge.compare import CompareError, export_rows
        from fairtui.judge.export import OutputError, render, write_output
        from fairtui.runs.runfolder import RunView

        try:
            rows = export_rows([RunView.load(d) for d in run_dirs], None, "best")
            written = write_output(target, render(rows, fmt, "best"), screen.app.home)
        except (CompareError, OutputError) as err:
            screen.notify(str(err), severity="error")
            return
        screen.notify(f"exported {len(run_dirs)} run(s) to {written}")

    screen.app.push_screen(ExportDialog(len(run_dirs), default), write)


def _write_in_thread(screen: Screen, run_dirs: list[Path], fmt: str, target: Path) -> None:
    from fairtui.judge.export import OutputError, write_output
    from fairtui.figures import PlotError, figure_format
    from fairtui.runs.runfolder import RunView
    from fairtui.judge.tbexport import TensorBoardError

    say = screen.app.call_from_thread
    try:
        views = [RunView.load(d) for d in run_dirs]
        if fmt == "tensorboard":
            from fairtui.judge.tbexport import export as tb_export

            folders = tb_export(views, target, screen.app.home)
            say(screen.notify, f"wrote {len(folders)} TensorBoard run folder(s) under {target} "
                               f"(tensorboard --logdir {target})")
            return
        from fairtui.figures.make import PlotRequest, render

        data = render(PlotRequest(fmt.split(":", 1)[1]), views, figure_format(str(target)))
        written = write_output(target, data, screen.app.home)
    except (PlotError, OutputError, TensorBoardError) as err:
        say(screen.notify, str(err), severity="error")
        return
    except Exception as err:  # noqa: BLE001 - a figure that fails must not take the app with it
        say(screen.notify, f"could not write {target}: {type(err).__name__}: {err}", severity="error")
        return
    say(screen.notify, f"wrote {fmt.split(':', 1)[-1]} figure of {len(run_dirs)} run(s) to {written}")
