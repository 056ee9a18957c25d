"""The per-class test tables of a run: a table per checkpoint (and setting), a column per attack.

The same tables as `fairtui show` prints (`fairtui.runs.report.per_class_tables`), so the app and the
command line say the same thing; other evaluations (a subset, another eps) follow as tables of their
own, titled as exploratory with what differs, never mixed into the run's numbers.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static


class ResultsScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("p", "app.pop_screen", "back", show=False)]

    def __init__(self, run_id: str):
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        yield Static("", id="results-title", markup=False)
        with VerticalScroll(id="results-body"):
            yield Static("", id="results-tables")
        yield Footer()

    def on_mount(self) -> None:
        from rich.console import Group
        from rich.text import Text

        from fairtui.runs.home import short_id
        from fairtui.runs.display import SHOW_EXPLORATORY
        from fairtui.runs.report import exploratory_groups, exploratory_tables, per_class_tables
        from fairtui.runs.runfolder import RunView

        view = RunView.load(self.app.run_dir(self.run_id))
        from fairtui.runs.usertext import inert

        self.query_one("#results-title", Static).update(f"{inert(view.name)} [{short_id(self.run_id)}]: per-class test "
                                                        "results (< marks the worst class)")
        parts: list = per_class_tables(view) or [Text("no test results yet: e evaluates the run")]
        groups = exploratory_groups(view)
        if groups:
            parts.append(Text("other evaluations (not the run's result: settings differ from the profile)",
                              style="bold"))
            hidden = max(0, len(groups) - SHOW_EXPLORATORY)
            if hidden:
                parts.append(Text(f"{hidden} earlier exploratory tables not shown (the latest {SHOW_EXPLORATORY} "
                                  f"are): fairtui show {self.run_id} --all"))
            parts += exploratory_tables(view, groups[hidden:])  # only the tables shown are built
        self.query_one("#results-tables", Static).update(Group(*parts))
        self.query_one("#results-body").focus()
