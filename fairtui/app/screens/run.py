"""The run screen: the epoch log as it streams, per-class bars, class-wise state trajectories, results.

It starts from the folded stream (fairtui.runs.digest: the run's start, the latest of each epoch and of
each evaluation, its end) and follows ``events.jsonl`` from where that ends, so a finished run
opens at once however long its stream, and a live one keeps updating: the same code path for both.
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, ProgressBar, RichLog, Static

from fairtui.app.messages import EventsArrived, ProgressRead
from fairtui.app.widgets.bars import ClassBars
from fairtui.app.widgets.plot import LinePlot
from fairtui.runs.home import short_id
from fairtui.runs.runfolder import EventTail, process_alive
from fairtui.runs.runstate import RunState, describe_summary, result_lines
from fairtui.runs.usertext import inert


class RunScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"), Binding("left_square_bracket", "state(-1)", "curve"),
        Binding("right_square_bracket", "state(1)", "curve"), Binding("left", "highlight(-1)", "class -", show=False),
        Binding("right", "highlight(1)", "class +", show=False), Binding("s", "stop", "stop"),
        Binding("r", "resume", "resume", show=False),
        Binding("e", "evaluate", "eval"), Binding("a", "notes", "notes", show=False),
        Binding("p", "results", "per class"),
        Binding("c", "accuracy", "robust/clean", show=False),
        # priority: the focused log would take pgup / pgdn for itself
        Binding("pagedown", "page(1)", "classes", show=False, priority=True),
        Binding("pageup", "page(-1)", "classes", show=False, priority=True),
    ]
    WRITING = frozenset({"stop", "resume", "evaluate", "notes"})  # the actions a committed run does not offer

    def __init__(self, run_id: str):
        super().__init__()
        self.run_id = run_id
        self.state = RunState(run_id=run_id)
        self.state_index = 0
        self.accuracy_index = 0
        self.highlight = 0
        self.tail: EventTail | None = None
        from collections import deque

        self.log_lines: deque[str] = deque(maxlen=self.LOG_LINES)  # the log's text, to wrap again on a resize
        self.log_width: int | None = None  # the width the log's lines were wrapped at

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"run {self.run_id}", id="run-title", markup=False)  # "[id]" is text, not a style
        yield Static("", id="run-summary", markup=False)
        with Horizontal(id="progress-row"):
            yield ProgressBar(total=1.0, show_eta=False, show_percentage=False, id="progress-bar")
            yield Static("", id="progress-text", markup=False)
        with Horizontal(id="run-main"):
            with Vertical(id="bars-pane"):
                yield ClassBars(id="bars")
            with Vertical(id="plot-pane"):
                yield LinePlot(id="plot")
                # On a large terminal the method's class-wise state gets its own plot under the
                # accuracies; on a small one the single plot cycles through both ([ and ]).
                yield LinePlot(id="plot-state")
        yield Static("", id="results")
        yield RichLog(id="log", max_lines=self.LOG_LINES, wrap=True, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        import json

        run_dir = self.app.run_dir(self.run_id)
        try:
            name = json.loads((run_dir / "meta.json").read_text()).get("name") or self.run_id
        except (OSError, ValueError):
            name = self.run_id
        self.display_name = inert(name)  # the run's own name (--name), not its profile's; shown inert
        try:
            size = f"{(run_dir / 'events.jsonl').stat().st_size / 1e6:.0f} MB of "
        except OSError:
            size = ""
        self.query_one("#run-title", Static).update(f"{self.display_name} [{short_id(self.run_id)}]  loading "
                                                    f"{size}events")
        self.load()
        self.set_interval(self.app.poll_interval / 2, self.poll)

    @work(thread=True, exclusive=True, group="load")
    def load(self) -> None:
        """The run as its folded stream (fairtui.runs.digest) holds it, read off the screen's thread so that keys
        work meanwhile (a long stream not folded before takes seconds), then followed from where it ends."""
        from textual.worker import get_current_worker

        from fairtui.runs.digest import replay
        from fairtui.runs.runfolder import RunView

        worker = get_current_worker()
        run_dir = self.app.run_dir(self.run_id)
        view = RunView.load(run_dir, cancelled=lambda: worker.is_cancelled)
        if worker.is_cancelled:
            return
        self.post_message(EventsArrived(self.run_id, replay(view.digest)))
        self.tail = EventTail(run_dir / "events.jsonl", offset=view.digest.offset)
        self.poll()

    @work(thread=True, exclusive=True, group="events")
    def poll(self) -> None:
        events = self.tail.read_new() if self.tail else []
        if events:
            self.post_message(EventsArrived(self.run_id, events))
        import json

        run_dir = self.app.run_dir(self.run_id)
        try:
            progress = json.loads((run_dir / "progress.json").read_text())
        except (OSError, ValueError):
            progress = {}
        wait = self.app.queue.wait_reasons().get(self.run_id) if (run_dir / "queued").exists() else None
        if progress.get("phase") == "eval" and not process_alive(progress):
            progress = {}  # an evaluation that died (or finished without saying so): not current
        self.post_message(ProgressRead(progress, wait))  # never waits for the screen (events must keep flowing)

    def on_progress_read(self, message: ProgressRead) -> None:
        from fairtui.runs.runstate import progress_header

        progress = message.progress
        if message.wait:
            self.query_one("#run-summary", Static).update(f"queued: {message.wait}")
        live = self.state.status in ("running", "starting") or progress.get("phase") == "eval"
        text, fraction = progress_header(progress, self.state.epochs, self.state.total_epochs) if live \
            else ("", None)
        row = self.query_one("#progress-row")
        row.display = fraction is not None
        if fraction is not None:
            self.query_one("#progress-bar", ProgressBar).update(progress=fraction)
            self.query_one("#progress-text", Static).update(" " + text)

    LOG_LINES = 2000  # what the log keeps

    def on_events_arrived(self, message: EventsArrived) -> None:
        log = self.query_one(RichLog)
        lines = []
        for event in message.events:
            self.state.ingest(event)
            line = self.state.log_line(event)
            if line:
                lines.append(line)
        self.log_lines.extend(lines[-self.LOG_LINES:])  # a long run's replay: the log would drop the rest anyway
        if self.log_width is None:  # the first lines: written once the log has its width (a RichLog written
            self.call_after_refresh(self.rewrap_log)  # before its layout wraps at 78 columns, and keeps them)
        else:
            for line in lines[-self.LOG_LINES:]:
                log.write(line, width=self.log_width)
        self.refresh_widgets()

    def rewrap_log(self) -> None:
        """A RichLog keeps the wraps of the width it was written at: after a resize, its lines are written again
        at the new width (cut or half-empty lines otherwise, until the screen is opened again)."""
        log = self.query_one(RichLog)
        width = log.scrollable_content_region.width
        if not width or width == self.log_width:
            return
        self.log_width = width
        at_end = log.scroll_offset.y >= log.max_scroll_y
        log.clear()
        for line in self.log_lines:  # at the log's width: unsaid, RichLog measures by the app console's width
            log.write(line, width=width, scroll_end=False)
        if at_end:
            log.scroll_end(animate=False)

    def refresh_widgets(self) -> None:
        clean, robust, caption = self.state.latest_bars()
        self.query_one(ClassBars).show(self.state.names, clean, robust, caption)
        self.query_one("#run-summary", Static).update(describe_summary(self.state))
        self.query_one("#results", Static).update("\n".join(result_lines(self.state)))
        name = getattr(self, "display_name", None) or inert(self.state.config.get("name", ""))
        self.query_one("#run-title", Static).update(f"{name} [{short_id(self.run_id)}]  {self.state.status}")
        self.schedule_plot()

    PLOT_EVERY_S = 0.5  # redraw the curves at most this often while epochs stream in

    def schedule_plot(self) -> None:
        """Redraw the curves soon, once for any number of epochs arriving meanwhile (plotting hundreds of
        epochs per class on every batch of events would hold the stream up)."""
        if not getattr(self, "_plot_pending", False):
            self._plot_pending = True
            self.set_timer(self.PLOT_EVERY_S, self._plot_now)

    def _plot_now(self) -> None:
        self._plot_pending = False
        self.refresh_plot()

    # Two plots (accuracy above, the method's state below) from this terminal size on.
    SPLIT_SIZE = (120, 36)

    @property
    def split(self) -> bool:
        return self.size.width >= self.SPLIT_SIZE[0] and self.size.height >= self.SPLIT_SIZE[1]

    def on_resize(self, event) -> None:
        self.query_one("#plot-state", LinePlot).display = self.split
        self.refresh_plot()
        self.call_after_refresh(self.rewrap_log)  # once the log has its new width

    def refresh_plot(self) -> None:
        from fairtui.runs.runstate import ACCURACY_KEYS

        keys = self.state.state_keys()
        plot, state_plot = self.query_one("#plot", LinePlot), self.query_one("#plot-state", LinePlot)
        state_plot.display = self.split
        if self.state.imported is not None:  # nothing trained here: no curves to wait for
            plot.show("imported model: not trained here, so no curves; its evaluations are below "
                      "(p: per class, e: evaluate)", [], [], [])
            state_plot.display = False
            return
        if not keys:
            plot.show("per-class values: waiting for the first epoch", [], [], [])
            state_plot.show("method state: waiting for the first epoch", [], [], [])
            return
        method_keys = [k for k in keys if k not in ACCURACY_KEYS]
        if not self.split:
            self._show(plot, keys, self.state_index, "[ ]")
            return
        # accuracy above (c: robust / clean), the method's class-wise state below ([ ])
        self._show(plot, list(ACCURACY_KEYS), self.accuracy_index, "c")
        if method_keys:
            self._show(state_plot, method_keys, self.state_index, "[ ]")
        else:
            name = (self.state.config.get("method") or {}).get("name") or "this method"
            state_plot.show(f"{name} logs no class-wise state", [], [], [])

    def _show(self, plot: LinePlot, keys: list[str], index: int, hint: str) -> None:
        key = keys[index % len(keys)]
        epochs, series, labels = self.state.trajectory(key)
        self.highlight %= max(1, len(series))
        plot.show(f"{key} ({hint} {index % len(keys) + 1}/{len(keys)})", epochs, series, labels, self.highlight)

    def action_accuracy(self) -> None:
        self.accuracy_index += 1
        self.refresh_plot()

    def action_state(self, step: int) -> None:
        self.state_index += step
        self.refresh_plot()

    def action_highlight(self, step: int) -> None:
        self.highlight += step
        self.refresh_plot()

    def action_results(self) -> None:
        from fairtui.app.screens.results import ResultsScreen

        self.app.push_screen(ResultsScreen(self.run_id))

    def action_page(self, step: int) -> None:
        self.query_one(ClassBars).turn(step)

    def action_evaluate(self) -> None:
        run_dir = self.app.writable_dir(self.run_id)
        if run_dir is None:
            return
        from fairtui.app.actions import evaluate

        evaluate(self, run_dir)

    def action_notes(self) -> None:
        run_dir = self.app.writable_dir(self.run_id)
        if run_dir is None:
            return
        from fairtui.app.actions import edit_notes

        edit_notes(self, run_dir)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A committed run (--results) is read only: what would write to it leaves the footer and its keys."""
        return not (action in self.WRITING and self.app.read_only(self.run_id))

    def action_stop(self) -> None:
        run_dir = self.app.writable_dir(self.run_id)
        if run_dir is None:
            return
        from fairtui.app.actions import stop_or_kill

        stop_or_kill(self, run_dir)

    def action_resume(self) -> None:
        """`r` here as on the runs screen: a stopped, failed or lost run queued to continue from its checkpoint."""
        run_dir = self.app.writable_dir(self.run_id)
        if run_dir is None:
            return
        from fairtui.launch.control import ControlError, queue_resume

        try:
            said = queue_resume(run_dir, self.app.queue)
        except ControlError as err:
            self.notify(str(err), severity="warning")
            return
        self.app.tick_queue()
        self.notify(said)
