"""What the runs and run screens do for notes, evaluations and exports: the command line's own paths."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from textual.screen import Screen


def edit_notes(screen: Screen, run_dir: Path) -> None:
    """Read or write the run's notes in a dialog (meta.json under its lock, as `fairtui note`)."""
    from fairtui.app.dialogs import NotesDialog
    from fairtui.runfolder import RunView
    from fairtui.usertext import inert

    view = RunView.load(run_dir)

    def save(text: str | None) -> None:
        if text is None:
            return
        from fairtui.control import update_meta
        from fairtui.home import ReadOnlyHome
        from fairtui.usertext import UserTextError, check_note

        try:
            check_note(text)
            update_meta(run_dir, lambda meta: meta.__setitem__("notes", text))
        except (OSError, ReadOnlyHome, UserTextError) as err:
            screen.notify(f"notes not saved: {err}", severity="error", markup=False)
            return
        screen.notify(f"notes of {inert(view.name)} saved", markup=False)

    screen.app.push_screen(NotesDialog(inert(view.name), view.meta.get("notes") or ""), save)


def evaluate(screen: Screen, run_dir: Path) -> None:
    """Ask what to evaluate, then start the engine as `fairtui eval` does; progress on the run screen."""
    from fairtui.app.dialogs import EvalDialog
    from fairtui.runfolder import RunView

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
        from fairtui.launcher import GpuChoice, start_engine

        command = [sys.executable, "-m", "engine", "eval", str(run_dir), "--request", json.dumps(request)]
        try:
            start_engine(run_dir, GpuChoice.parse(view.meta.get("gpus")), command=command)
        except OSError as err:
            screen.notify(f"could not start the evaluation: {err}", severity="error")
            return
        screen.notify(f"evaluating {view.name}: {', '.join(request['attacks'])} @ {request['checkpoint']} "
                      "(progress on its run screen; results join its table)")

    norm = (view.config.get("attack") or {}).get("norm", "linf")
    screen.app.push_screen(EvalDialog(view.name, checkpoints, norm), start)


def export(screen: Screen, run_dirs: list[Path]) -> None:
    """Write the runs' summary table (`fairtui export`) to a file and say where."""
    from fairtui.app.dialogs import ExportDialog

    default = str(Path.cwd() / f"fairtui-export-{time.strftime('%Y%m%d-%H%M%S')}.md")

    def write(choice: tuple[str, str] | None) -> None:
        if choice is None:
            return
        fmt, path = choice
        from fairtui.compare import CompareError, export_rows
        from fairtui.export import OutputError, render, write_output
        from fairtui.runfolder import RunView

        try:
            rows = export_rows([RunView.load(d) for d in run_dirs], None, "best")
        except CompareError as err:
            screen.notify(str(err), severity="error")
            return
        target = Path(path).expanduser()
        if fmt != "md" and target.suffix == ".md":
            target = target.with_suffix({"csv": ".csv", "latex": ".tex", "json": ".json"}[fmt])
        try:
            written = write_output(target, render(rows, fmt, "best"), screen.app.home)
        except OutputError as err:
            screen.notify(str(err), severity="error")
            return
        screen.notify(f"exported {len(run_dirs)} run(s) to {written}")

    screen.app.push_screen(ExportDialog(len(run_dirs), default), write)
