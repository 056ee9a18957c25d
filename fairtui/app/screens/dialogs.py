"""Small modal dialogs: confirm, ask for text, help."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

HELP_TEXT = """\
fairtui keys (everything works without a mouse)

Runs screen
  n        new run (launch dialog)          enter    open the run
  space    mark / unmark for comparison     c        compare the marked runs (or this one and the next)
  s        stop the run (clean stop)        r        resume a stopped, failed or lost run
  R        rerun with the same profile      t        tag the run
  d        delete the run (asks first)      /        filter as you type
  o        sort by the next column          O        reverse the sort
  g        group sweeps (a sweep's children together; its progress is in the status line)
Run screen
  [ / ]    the previous / next class-wise quantity (eps, beta, weights, multipliers, Hedge weights)
  left / right   highlight another class    s        stop the run
Everywhere
  ?        this help                        escape   back                 q   quit (runs keep training)
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
            yield Input(value=self.value, id="text")
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
