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
                 compare: list[str] | None = None, queue_worker: bool = True, results: list[Path] | None = None,
                 compare_groups: bool = False, compare_options: dict | None = None):
        super().__init__()
        self.home = home
        self.profiles_dir = profiles_dir
        self.inventory = gpu_inventory
        self.poll_interval = poll_interval
        self.index = RunIndex(home)
        # queue_worker: what the app queues starts after it quits too (a detached worker)
        self.queue = LocalQueue(home, per_gpu=per_gpu, worker=queue_worker)
        self.open_run, self.compare_runs, self.compare_groups = open_run, compare, compare_groups
        self.compare_options = compare_options or {}  # `compare --tui`'s --baseline and --checkpoint
        # committed run folders (`fairtui --results DIR`): listed beside the home's runs, read only
        self.committed: dict[str, Path] = committed_runs(results or [])
        self._committed_docs: list[dict] | None = None

    def run_dir(self, run_id: str) -> Path:
        """A run's folder: a committed one of --results, else the home's."""
        return self.committed.get(run_id) or self.home / "runs" / run_id

    def committed_docs(self) -> list[dict]:
        """The --results runs as index documents, tagged committed (read once: committed files do not change)."""
        if self._committed_docs is None:
            from fairtui.runs.store import document_for

            self._committed_docs = [{**document_for(d), "tags": ["committed"]} for d in self.committed.values()]
        return self._committed_docs

    def writable_dir(self, run_id: str) -> Path | None:
        """The folder of a run the app may act on (stop, resume, edit, evaluate, delete); None, said, for a
        committed one (--results)."""
        if self.read_only(run_id):
            self.notify("a committed run (--results) is read only: compare, export and open it", severity="warning")
            return None
        return self.run_dir(run_id)

    def read_only(self, run_id: str) -> bool:
        """A committed run (--results): shown, compared and exported, never stopped, resumed, edited or deleted."""
        return run_id in self.committed

    def on_mount(self) -> None:
        from fairtui.app.screens.runs import RunsScreen

        from fairtui.runs.home import display_path

        self.sub_title = display_path(self.home)
        self.push_screen(RunsScreen())
        if self.compare_runs:
            from fairtui.app.screens.compare import CompareScreen

            self.push_screen(CompareScreen(self.compare_runs, groups=self.compare_groups, **self.compare_options))
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


def committed_runs(folders: list[Path]) -> dict[str, Path]:
    """run id -> folder, for every run of the folders of committed run files (<profile>/<run-id>/)."""
    from fairtui.judge.sources import results_runs

    return {d.name: d for folder in folders for d in results_runs(Path(folder))}
