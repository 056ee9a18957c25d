"""The Textual app: state and lifecycle only; screens and widgets live in their own modules."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from textual.app import App
from textual.binding import Binding

from fairtui.launch.gpus import GpuInfo, inventory
from fairtui.launch.queue import LocalQueue
from fairtui.runs.store import RunIndex


class FairtuiApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "fairtui"
    BINDINGS = [Binding("question_mark", "help", "help"), Binding("q", "quit", "quit")]

    def __init__(self, home: Path, profiles_dir: Path, gpu_inventory: Callable[[], list[GpuInfo]] = inventory,
                 poll_interval: float = 1.0, per_gpu: int | None = None, open_run: str | None = None,
                 compare: list[str] | None = None, queue_worker: bool = True):
        super().__init__()
        self.home = home
        self.profiles_dir = profiles_dir
        self.inventory = gpu_inventory
        self.poll_interval = poll_interval
        self.index = RunIndex(home)
        # queue_worker: what the app queues starts after it quits too (a detached worker)
        self.queue = LocalQueue(home, per_gpu=per_gpu, worker=queue_worker)
        self.open_run, self.compare_runs = open_run, compare

    def on_mount(self) -> None:
        from fairtui.app.screens.runs import RunsScreen

        from fairtui.runs.home import display_path

        self.sub_title = display_path(self.home)
        self.push_screen(RunsScreen())
        if self.compare_runs:
            from fairtui.app.screens.compare import CompareScreen

            self.push_screen(CompareScreen(self.compare_runs))
        elif self.open_run:
            from fairtui.app.screens.run import RunScreen

            self.push_screen(RunScreen(self.open_run))
        self.set_interval(max(self.poll_interval, 1.0), self.tick_queue)

    def tick_queue(self) -> None:
        """Start queued runs whose GPUs are free (a thread: it may start processes)."""
        self.run_worker(self.queue.tick, thread=True, exclusive=True, group="queue")

    def action_help(self) -> None:
        from fairtui.app.dialogs import HelpScreen

        self.push_screen(HelpScreen())
