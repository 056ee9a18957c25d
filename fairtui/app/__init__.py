"""The terminal app. `make_app` builds it for the command line and the tests alike."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def default_profiles_dir() -> Path:
    """./profiles if there is one here, else the profiles shipped beside the package."""
    here = Path.cwd() / "profiles"
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "profiles"


def make_app(home: str | Path | None = None, profiles_dir: str | Path | None = None,
             gpu_inventory: Callable | None = None, poll_interval: float = 1.0, per_gpu: int | None = None,
             open_run: str | None = None, compare: list[str] | None = None, queue_worker: bool = True,
             results: list | None = None, compare_groups: bool = False, compare_options: dict | None = None):
    from fairtui.app.app import FairtuiApp
    from fairtui.launch.gpus import inventory
    from fairtui.runs.home import resolve_home

    return FairtuiApp(resolve_home(home), Path(profiles_dir) if profiles_dir else default_profiles_dir(),
                      gpu_inventory or inventory, poll_interval, per_gpu, open_run, compare, queue_worker,
                      [Path(r) for r in results or []], compare_groups, compare_options)


def run_app(**kwargs) -> None:
    make_app(**kwargs).run()
