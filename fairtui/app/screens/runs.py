"""The runs screen (the home): the history as a table, live status, filter, sort and the run actions."""

from __future__ import annotations

import threading
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from fairtui.app.messages import RunsLoaded
from fairtui.app.screens.runs_table import (COLUMNS, SORTABLE, cells, column_widths, counts_line, fitting_columns,
                                            matches, row_for, sort_key, study_of, wait_line)
from fairtui.app.widgets.lineinput import LineInput
from fairtui.app.widgets.table import RunsTable

FIRST_ROWS = 100  # rows added at once: more than a screen holds
FILL_CHUNK = 1000  # then this many at a time, with the app free to draw and take keys in between
FILL_PAUSE_S = 0.005
FIRST_WAIT_S = 2.0  # the most the folders' reconciliation waits for the stored index to be drawn


class RunsScreen(Screen):
    # The footer names the keys of a working day; the rest are in `?` (the footer has 80 columns).
    BINDINGS = [
        Binding("n", "new_run", "new"), Binding("enter", "open_run", "open"),
        Binding("space", "mark", "mark"), Binding("c", "compare", "compare"), Binding("e", "evaluate", "eval"),
        Binding("s", "stop", "stop", show=False), Binding("r", "resume", "resume", show=False),
        Binding("R", "rerun", "rerun", show=False), Binding("t", "tag", "tag", show=False),
        Binding("a", "notes", "notes", show=False), Binding("x", "export", "export", show=False),
        Binding("d", "delete", "delete", show=False), Binding("slash", "filter", "filter"),
        Binding("o", "sort", "sort", show=False), Binding("O", "reverse", "reverse", show=False),
        Binding("g", "group", "group sweeps", show=False), Binding("y", "study", "study", show=False),
        Binding("j", "judge", "judgement", show=False),
        Binding("escape", "clear_filter", "clear", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.docs: list[dict] = []
        self.marked: set[str] = set()
        self.filter_text = ""
        self.sort_column, self.sort_reverse = "started", True
        self.shown_columns: list[int] = []
        self.waits: dict[str, str] = {}
        self.loaded = False  # the first read of the index has not arrived: say so, not "0 of 0 runs"
        self.first_shown = threading.Event()  # the first rows are drawn
        self.reading = False  # a read of the index is in flight
        # What the table holds: the layout (columns shown and their widths), the rows in order, and how
        # many of them are in the table yet (the rest are added in chunks after the first screen).
        self.table_layout: tuple = ()
        self.row_ids: list[str] = []
        self.table_rows: list[tuple] = []
        self.filled = 0
        self.generation = 0  # a new fill makes the chunks of an older one stop
        self.row_cache: dict[str, tuple[dict, bool, tuple]] = {}
        self.select_next: str | None = None  # a run just launched: selected once the table shows it

    def compose(self) -> ComposeResult:
        yield Header()
        yield LineInput(placeholder="/ filter by name, method, data, status or tag", id="filter")
        yield RunsTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static("reading the run history...", id="status-line", markup=False)  # names are text, not markup
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.focus()
        self.load()
        self.set_interval(self.app.poll_interval, self.poll)

    def poll(self) -> None:
        """Read the index again, unless the last read is still going (10,000 folders on a busy machine)."""
        if not self.reading:
            self.load()

    def on_screen_resume(self) -> None:
        """Back from a dialog or another screen: the keys go to the table again (not the filter box)."""
        self.query_one(DataTable).focus()

    @work(thread=True, exclusive=True, group="runs")
    def load(self) -> None:
        self.reading = True
        try:
            self.read_index()
        finally:
            self.reading = False

    def read_index(self) -> None:
        if not self.loaded:  # the index as stored first (one file), then reconciled with every folder
            stored = self.app.index.stored()
            if stored:
                self.post_message(RunsLoaded(stored, {}))
                self.first_shown.wait(FIRST_WAIT_S)  # reading the folders would slow drawing them (the GIL)
        docs = self.app.index.read() + self.app.committed_docs()
        waits = self.app.queue.wait_reasons() if any(d.get("status") == "queued" for d in docs) else {}
        self.post_message(RunsLoaded(docs, waits))

    def writable_id(self) -> str | None:
        """The highlighted run, unless it is a committed one (--results): those are read only (said)."""
        run_id = self.selected_id()
        return run_id if run_id and self.app.writable_dir(run_id) else None

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        if self.loaded and message.docs == self.docs and message.waits == self.waits:  # nothing changed
            return
        self.loaded = True
        self.docs, self.waits = message.docs, message.waits or {}
        self.render_rows()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.update_status_line()

    def visible(self) -> list[dict]:
        docs = [d for d in self.docs if matches(d, self.filter_text)]
        return sorted(docs, key=lambda d: sort_key(d, self.sort_column), reverse=self.sort_reverse)

    def on_resize(self, event) -> None:
        self.render_rows()  # columns drop out, or come back, with the width

    def row(self, doc: dict) -> tuple:
        """``row_for``, kept per run while its document is unchanged (a running run's ETA moves: never kept)."""
        marked = doc["run_id"] in self.marked
        kept = self.row_cache.get(doc["run_id"])
        if kept is not None and kept[1] == marked and kept[0] == doc:
            return kept[2]
        row = row_for(doc, marked)
        if doc.get("status") != "running":
            self.row_cache[doc["run_id"]] = (doc, marked, row)
        return row

    def render_rows(self) -> None:
        """Show the visible runs. When the same runs are shown in the same order with the same columns,
        only the cells that changed are updated; otherwise the table is refilled: the first screen of
        rows at once (and down to the selected run), the rest in chunks of FILL_CHUNK, so that with
        10,000 runs the first screen shows at once and the keys keep working while the rest arrive."""
        table = self.query_one(RunsTable)
        current = self.selected_id()
        docs = self.visible()
        if len(self.row_cache) > 2 * len(self.docs) + 100:  # runs that were deleted
            self.row_cache.clear()
        rows = [self.row(doc) for doc in docs]
        ids = [d["run_id"] for d in docs]
        if self.select_next in ids:
            current, self.select_next = self.select_next, None
        widths = column_widths(rows)
        shown = fitting_columns(rows, table.size.width or self.size.width, widths)
        layout = (tuple(shown), tuple(widths[i] for i in shown))
        if layout == self.table_layout and ids == self.row_ids and self.filled == len(ids) \
                and current == self.selected_id():
            for key, old, new in zip(ids, self.table_rows, rows):
                if old != new:
                    for i, cell in zip(shown, cells(new, shown)):
                        if old[i] != new[i]:
                            table.update_cell(key, COLUMNS[i][0], cell)
            self.table_rows = rows
            self.update_status_line()
            return
        if layout != self.table_layout:
            table.clear(columns=True)
            table.fixed_widths = True
            for i in shown:  # the width without the cell padding (one cell either side)
                table.add_column(COLUMNS[i][1], key=COLUMNS[i][0], width=widths[i] - 2)
            self.table_layout, self.shown_columns = layout, shown
        else:
            table.clear()
        self.row_ids, self.table_rows, self.filled = ids, rows, 0
        self.generation += 1
        at = ids.index(current) if current in ids else None
        self.fill(self.generation, max(FIRST_ROWS, (at or 0) + 1))
        if at is not None:
            table.move_cursor(row=at)
        self.update_status_line()
        if self.loaded and not self.first_shown.is_set():
            self.call_after_refresh(self.first_shown.set)  # once the rows are drawn

    def fill(self, generation: int, count: int = 0) -> None:
        """Add the next rows to the table (``count``, or a chunk), then schedule the next chunk."""
        if generation != self.generation:  # a newer fill began
            return
        table = self.query_one(RunsTable)
        end = min(len(self.row_ids), self.filled + (count or FILL_CHUNK))
        shown = list(self.table_layout[0])
        for key, row in zip(self.row_ids[self.filled:end], self.table_rows[self.filled:end]):
            table.add_row(*cells(row, shown), key=key)
        self.filled = end
        if end < len(self.row_ids):
            self.set_timer(FILL_PAUSE_S, lambda: self.fill(generation))

    def update_status_line(self) -> None:
        """The counts, or, on a queued run, what it waits for and how to change that."""
        current = self.selected_id()
        if current in self.waits:
            from fairtui.runs.usertext import inert

            name = inert(next((d.get("name") for d in self.docs if d["run_id"] == current), current))
            self.query_one("#status-line", Static).update(wait_line(self.waits[current], name, self.size.width or 80))
            return
        if not self.loaded:
            self.query_one("#status-line", Static).update("reading the run history...")
            return
        self.query_one("#status-line", Static).update(counts_line(
            self.docs, len(self.visible()), len(self.marked), self.sort_column, self.sort_reverse, self.size.width or 80))

    def selected_id(self) -> str | None:
        table = self.query_one(DataTable)
        if table.row_count == 0:
            return None
        try:
            return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:  # the cursor is outside a table being rebuilt
            return None

    def run_dir(self, run_id: str) -> Path:
        return self.app.run_dir(run_id)

    # -- actions ----------------------------------------------------------------------------------
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_run()

    def action_open_run(self) -> None:
        run_id = self.selected_id()
        if run_id:
            from fairtui.app.screens.run import RunScreen

            self.app.push_screen(RunScreen(run_id))

    def action_mark(self) -> None:  # mark (or unmark) the highlighted run and move on, as a file manager does
        run_id = self.selected_id()
        if run_id:
            self.marked.symmetric_difference_update({run_id})
            self.render_rows()
            self.query_one(DataTable).action_cursor_down()

    def action_compare(self) -> None:
        ids = [d["run_id"] for d in self.visible()]
        chosen = [i for i in ids if i in self.marked]
        if len(chosen) < 2:
            current = self.selected_id()
            if current and current in ids and ids.index(current) + 1 < len(ids):
                chosen = [current, ids[ids.index(current) + 1]]
        if len(chosen) < 2:
            self.notify("mark two or more runs with space, then press c", severity="warning")
            return
        from fairtui.app.screens.compare import CompareScreen

        self.app.push_screen(CompareScreen(chosen))

    def action_study(self) -> None:
        name = study_of(next((d for d in self.docs if d["run_id"] == self.selected_id()), {}))
        if name is None:
            return self.notify("this run is not a trial of a study (fairtui tune)", severity="warning")
        from fairtui.app.screens.study import StudyScreen

        self.app.push_screen(StudyScreen(name))

    def action_judge(self) -> None:
        from fairtui.app.screens.judge import JudgeScreen, judge_key

        key = judge_key(next((d for d in self.docs if d["run_id"] == self.selected_id()), {}))
        if key is None:
            return self.notify("this run is not a seed of a judgement (fairtui judge)", severity="warning")
        self.app.push_screen(JudgeScreen(key))

    def action_new_run(self) -> None:
        from fairtui.app.screens.launch import LaunchDialog

        self.app.push_screen(LaunchDialog(), self.launched)

    def launched(self, run_id: str | None) -> None:
        """The dialog's new run (a sweep's first): queued, and selected, so that enter opens it; a new judgement
        ("judge:<key>") opens its screen."""
        if run_id and run_id.startswith("judge:"):
            from fairtui.app.screens.judge import JudgeScreen

            self.app.push_screen(JudgeScreen(run_id.split(":", 1)[1]))
            return
        if run_id:
            self.notify(f"run {run_id} queued")
            self.select_next = run_id
            self.load()

    def action_stop(self) -> None:
        run_id = self.writable_id()
        if run_id:
            from fairtui.app.actions import stop_or_kill

            stop_or_kill(self, self.run_dir(run_id))

    def action_resume(self) -> None:
        run_id = self.writable_id()
        if not run_id:
            return
        from fairtui.launch.control import ControlError, queue_resume

        try:
            said = queue_resume(self.run_dir(run_id), self.app.queue)
        except ControlError as err:
            self.notify(str(err), severity="warning")
            return
        self.app.tick_queue()
        self.notify(said)

    def action_rerun(self) -> None:
        run_id = self.writable_id()
        if not run_id:
            return
        from engine.contract.profile_schema import ProfileError
        from fairtui.launch.control import queue_rerun

        try:
            new_dir = queue_rerun(self.run_dir(run_id), self.app.queue)
        except ProfileError as err:
            self.notify(str(err), severity="error")
            return
        self.app.tick_queue()
        name = next((d.get("name") for d in self.docs if d["run_id"] == run_id), None) or run_id
        self.notify(f"rerun of {name} queued as {new_dir.name}")
        self.load()

    def action_tag(self) -> None:
        run_id = self.writable_id()
        if run_id:
            from fairtui.app.actions import edit_tags

            tags = next((d for d in self.docs if d["run_id"] == run_id), {}).get("tags") or []
            edit_tags(self, self.run_dir(run_id), list(tags), self.load)

    def action_notes(self) -> None:
        run_id = self.writable_id()
        if run_id:
            from fairtui.app.actions import edit_notes

            edit_notes(self, self.run_dir(run_id))

    def action_evaluate(self) -> None:
        run_id = self.writable_id()
        if run_id:
            from fairtui.app.actions import evaluate

            evaluate(self, self.run_dir(run_id))

    def action_export(self) -> None:
        ids = [d["run_id"] for d in self.visible() if d["run_id"] in self.marked] or (
            [self.selected_id()] if self.selected_id() else [])
        if not ids:
            self.notify("mark runs with space, then press x", severity="warning")
            return
        from fairtui.app.actions import export

        export(self, [self.run_dir(i) for i in ids])

    def action_delete(self) -> None:
        run_id = self.writable_id()
        if run_id:
            from fairtui.app.actions import delete

            def deleted() -> None:
                self.marked.discard(run_id)
                self.load()

            name = next((d for d in self.docs if d["run_id"] == run_id), {}).get("name") or ""
            delete(self, self.run_dir(run_id), name, deleted)

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.render_rows()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the filter opens the run it leaves highlighted (the first match): one enter, not two."""
        table = self.query_one(DataTable)
        table.focus()
        if self.filter_text.strip() and table.row_count:
            if table.cursor_row >= table.row_count:
                table.move_cursor(row=0)
            self.action_open_run()

    def action_clear_filter(self) -> None:
        self.query_one("#filter", Input).value = ""
        self.query_one(DataTable).focus()

    def action_sort(self) -> None:
        self.sort_column = SORTABLE[(SORTABLE.index(self.sort_column) + 1) % len(SORTABLE)]
        self.render_rows()

    def action_group(self) -> None:
        """Group a sweep's children together (sort by sweep, then name); again: back to newest first."""
        grouped = self.sort_column == "sweep"
        self.sort_column, self.sort_reverse = ("started", True) if grouped else ("sweep", False)
        self.render_rows()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.render_rows()
