"""A tuning study (`fairtui tune`) as a screen: its trials as rows (the best so far marked), the objective over
the trials as a plot (with the best so far), refreshed while trials run. Optuna's journal is read on a
worker thread, never on the event loop; enter opens a trial's run."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from fairtui.app.widgets.plot import LinePlot
from fairtui.runs.usertext import inert

POLL_S = 5.0  # a study's trials take minutes: its journal is read again this often


def trial_rows(doc: dict) -> list[tuple[str, ...]]:
    """One row per trial: mark (* the best), number, state, objective (%), parameters, run id."""
    from fairtui.runs.home import short_id

    best = (doc.get("best") or {}).get("trial")
    rows = []
    for t in doc.get("trials", []):
        value = f"{100 * t['value']:.1f}" if isinstance(t.get("value"), (int, float)) else "-"
        params = ", ".join(f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
                           for k, v in (t.get("params") or {}).items())
        rows.append(("*" if t["trial"] == best else "", str(t["trial"]), t.get("state", "?"), value, inert(params),
                     short_id(t["run_id"]) if t.get("run_id") else "-"))
    return rows


def objective_series(doc: dict) -> tuple[list[int], list[float | None], list[float | None]]:
    """The trials' numbers, their objective (None for pruned and failed ones) and the best so far, in %."""
    numbers, values, best, top = [], [], [], None
    for t in doc.get("trials", []):
        value = t.get("value") if t.get("state") == "complete" else None
        if value is not None:
            top = value if top is None else max(top, value)
        numbers.append(t["trial"])
        values.append(None if value is None else 100 * value)
        best.append(None if top is None else 100 * top)
    return numbers, values, best


class StudyScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("enter", "open_run", "open trial's run")]

    def __init__(self, study: str) -> None:
        super().__init__()
        self.study = study
        self.doc: dict = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"study {inert(self.study, markup=True)}: reading...", id="study-title")
        yield DataTable(id="study-trials", cursor_type="row")
        yield LinePlot(id="study-plot")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("", "trial", "state", "objective", "parameters", "run")
        self.read()
        self.set_interval(POLL_S, self.read)

    @work(thread=True, exclusive=True)
    def read(self) -> None:
        from fairtui.tune import study as tune

        try:
            study, req = tune.load(self.app.home, self.study, to_run=False)
            doc = tune.summary(study, req)
        except tune.TuneError as err:
            self.app.call_from_thread(self.show_error, str(err))
            return
        except Exception as err:  # noqa: BLE001 - a worker's error is a notice on the screen, never a dead app
            self.app.call_from_thread(self.show_error, f"study {self.study}: cannot be read: "
                                      f"{type(err).__name__}: {err}")
            return
        self.app.call_from_thread(self.show, doc)

    def show_error(self, message: str) -> None:
        self.query_one("#study-title", Static).update(inert(message, markup=True))

    def show(self, doc: dict) -> None:
        if doc == self.doc:
            return
        self.doc = doc
        trials = doc.get("trials", [])
        best = doc.get("best")
        done = sum(t.get("state") in ("complete", "pruned", "fail") for t in trials)
        said = f"best: trial {best['trial']} ({100 * best['value']:.1f})" if best else "no completed trial yet"
        finished = "; the test split evaluated once, for the best" if doc.get("finished") else ""
        self.query_one("#study-title", Static).update(inert(
            f"study {self.study}: {doc.get('objective')} on validation, {done} of {doc.get('budget')} trials "
            f"ended; {said}{finished}", markup=True))
        table = self.query_one(DataTable)
        current = table.cursor_row
        table.clear()
        for row in trial_rows(doc):
            table.add_row(*row, key=row[1])
        if trials:
            table.move_cursor(row=min(current, len(trials) - 1))
        numbers, values, best_so_far = objective_series(doc)
        self.query_one(LinePlot).show("objective (%) over trials", numbers, [values, best_so_far],
                                      ["objective", "best so far"], highlight=1, xlabel="trial", navigable=False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_run()

    def action_open_run(self) -> None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return
        trial = int(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        run_id = next((t.get("run_id") for t in self.doc.get("trials", []) if t["trial"] == trial), None)
        if not run_id or not (self.app.run_dir(run_id)).is_dir():
            self.notify("this trial has no run", severity="warning")
            return
        from fairtui.app.screens.run import RunScreen

        self.app.push_screen(RunScreen(run_id))
