"""Small modal dialogs: confirm, ask for text, help."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Select, Static, TextArea

from fairtui.app.widgets.lineinput import LineInput

HELP_TEXT = """\
fairtui keys (everything works without a mouse)
Runs screen
  n      new run (launch dialog)    enter  open the run
  space  mark / unmark              c      compare marked (or + next)
  s      stop (a clean stop)        r      resume stopped/failed/lost
  R      rerun the same profile     t      tags (sweep, study kept)
  a      read or write notes        e      evaluate (attacks, eps)
  x      export: table, figure, TB  d      delete (asks first)
  /      filter as you type         o / O  sort by next column / reverse
  g      group a sweep's children    y      the study of a trial
  j      the judgement of a seed (fairtui judge)
Run screen
  [ / ]  per-class curves (accuracy, eps, beta...)  c  robust / clean
  left / right  highlight a class   pgup / pgdn  more classes
  p      per-class tables  e  evaluate  a  notes  s  stop  r  resume
Compare screen: b  next baseline   g  groups of seeds   s  vs starts
Study screen:   enter  the trial's run   Judge screen:  s  stop runs
Launch dialog:  tab  next field   ctrl+l  launch   escape  cancel
                "judge against": a baseline, and the launch judges
Everywhere:     ?  help   escape  back   q  quit (runs keep training)
"""


class ConfirmDialog(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
                Binding("escape", "answer(False)", "cancel")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            yield Label("y: yes   n / escape: no", classes="hint")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class TextDialog(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, prompt: str, value: str = ""):
        super().__init__()
        self.prompt, self.value = prompt, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.prompt)
            yield LineInput(value=self.value, id="text")
            yield Label("enter: ok   escape: cancel", classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "close", "close"), Binding("question_mark", "close", "close"),
                Binding("q", "close", "close")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Static(HELP_TEXT, markup=False)

    def action_close(self) -> None:
        self.dismiss(None)


class NotesDialog(ModalScreen[str | None]):
    """The run's notes (meta.json's `notes`, as `fairtui note` writes them): several lines."""

    BINDINGS = [Binding("ctrl+s", "save", "save"), Binding("escape", "cancel", "cancel")]

    def __init__(self, run_name: str, notes: str):
        super().__init__()
        self.run_name, self.notes = run_name, notes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog notes"):
            yield Label(f"notes: {self.run_name}")
            yield TextArea(self.notes, id="notes-text")
            yield Label("ctrl+s: save   escape: cancel", classes="hint")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_save(self) -> None:
        self.dismiss(self.query_one(TextArea).text)

    def action_cancel(self) -> None:
        self.dismiss(None)


class EvalDialog(ModalScreen[dict | None]):
    """What `fairtui eval` asks: attacks, checkpoint, split, a class-balanced subset, eps."""

    BINDINGS = [Binding("escape", "cancel", "cancel"), Binding("ctrl+l", "start", "start")]

    def __init__(self, run_name: str, checkpoints: list[str], norm: str | None = None):
        """``norm``: the run's threat model, which bounds eps (an L-inf eps is at most 1)."""
        super().__init__()
        self.run_name, self.checkpoints, self.norm = run_name, checkpoints or ["best", "last"], norm

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog eval"):
            yield Label(f"evaluate {self.run_name}")
            from engine.contract.attacks import known

            yield LineInput(value="aa", placeholder=f"attacks: {known()}", id="eval-attacks")
            yield Select([(c, c) for c in self.checkpoints], value=self.checkpoints[0], allow_blank=False,
                         id="eval-checkpoint")
            yield Select([("test", "test"), ("val", "val")], value="test", allow_blank=False, id="eval-split")
            yield LineInput(placeholder="images per class (empty: the whole split)", id="eval-n")
            yield LineInput(placeholder="eps (empty: the profile's), e.g. 8/255", id="eval-eps")
            yield Static("", id="eval-error")
            yield Label("ctrl+l or enter: start   escape: cancel", classes="hint")

    def on_mount(self) -> None:
        self.query_one("#eval-attacks", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_start()

    def action_start(self) -> None:
        from engine.contract import EvalRequest, RequestError, check_eps
        from engine.contract.profile_schema import parse_fraction

        error = self.query_one("#eval-error", Static)
        attacks = [a.strip() for a in self.query_one("#eval-attacks", Input).value.replace(",", " ").split()]
        if not attacks:
            error.update("attacks: name at least one")
            return
        n_text = self.query_one("#eval-n", Input).value.strip()
        if n_text and not (n_text.isdigit() and int(n_text) > 0):
            error.update(f"images per class: a positive whole number, got {n_text!r}")
            return
        eps_text = self.query_one("#eval-eps", Input).value.strip()
        eps = None
        if eps_text:
            try:
                eps = parse_fraction(eps_text)
            except ValueError as err:
                error.update(f"eps: {err}")
                return
        try:  # engine.contract's rules, as `fairtui eval` checks them
            request = EvalRequest(attacks=tuple(attacks), checkpoint=self.query_one("#eval-checkpoint", Select).value,
                                  split=self.query_one("#eval-split", Select).value, n_per_class=int(n_text or 0),
                                  eps=eps)
            if eps is not None:
                check_eps(eps, self.norm)
        except RequestError as err:
            error.update(f"{err.field}: {err}")
            return
        self.dismiss(request.to_json())

    def action_cancel(self) -> None:
        self.dismiss(None)


EXPORTS = [("table: markdown", "md"), ("table: csv", "csv"), ("table: latex", "latex"), ("table: json", "json"),
           ("figure: per-class bars (classes)", "figure:classes"), ("figure: average vs worst (tradeoff)",
                                                                   "figure:tradeoff"),
           ("figure: per-class curves (curves)", "figure:curves"), ("figure: class-wise state (state)", "figure:state"),
           ("figure: confusion matrix, one run (confusion)", "figure:confusion"),
           ("TensorBoard log folder", "tensorboard")]
SUFFIXES = {"md": ".md", "csv": ".csv", "latex": ".tex", "json": ".json", "tensorboard": ""}


def export_path(path: str, fmt: str) -> str:
    """``path`` with the suffix of ``fmt`` when it has another export's suffix (or none): a table's own, a
    figure's .pdf unless it is .svg or .png already, none for a TensorBoard folder. A suffix of the
    user's own is left for the writer to judge."""
    from pathlib import PurePath

    p = PurePath(path)
    suffix = p.suffix.lower()
    if suffix not in (*SUFFIXES.values(), ".pdf", ".svg", ".png") or not p.name:
        return path
    if fmt.startswith("figure:"):
        return path if suffix in (".pdf", ".svg", ".png") else str(p.with_suffix(".pdf"))
    return str(p.with_suffix(SUFFIXES[fmt]))


class ExportDialog(ModalScreen[tuple[str, str] | None]):
    """Export runs as `fairtui export` and `fairtui plot` do: a table, a figure or a TensorBoard folder."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, count: int, default_path: str):
        super().__init__()
        self.count, self.default_path = count, default_path

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"export {self.count} run(s): a table (average, worst class, worst 20%, CV, MCD), a figure "
                        "(.pdf, .svg or .png) or TensorBoard")
            yield Select(EXPORTS, value="md", allow_blank=False, id="export-format")
            yield LineInput(value=self.default_path, id="export-path")
            yield Label("enter: write   escape: cancel", classes="hint")

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()

    def on_select_changed(self, event: Select.Changed) -> None:
        path = self.query_one("#export-path", Input)
        path.value = export_path(path.value, str(event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss((self.query_one("#export-format", Select).value, event.value.strip()))

    def action_cancel(self) -> None:
        self.dismiss(None)
