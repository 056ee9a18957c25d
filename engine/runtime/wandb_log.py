"""Each epoch's numbers also in Weights & Biases (`train.log_to = ["wandb"]`): a live dashboard sink
(engine.contract.sinks), fed by the engine under engine/runtime/sinks.py's guard (it never fails or changes a run).

`open` starts the W&B run (id = the run id, so a resumed run continues the same W&B run; the run's name
and tags, and the resolved profile as its config), each epoch is logged at step = epoch under
:mod:`engine.contract.scalars`' names, each headline result goes into the run's summary with its settings
(``settings/<split>/<checkpoint>/<attack>``), `close` finishes it (exit code 0 when completed). The mode is
`train.wandb_mode`, "offline" by default (these machines often have no network): the files are in
``RUN_DIR/wandb/offline-run-*``, for `wandb sync` later.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from engine.contract.sinks import RunInfo

log = logging.getLogger("engine")
EXTRA = "pip install 'fairtui[wandb]'"


class WandbSink:
    TITLE = "W&B"

    def __init__(self, run_dir: Path, profile: Any):
        self.run_dir, self.profile = Path(run_dir), profile
        self.run: Any = None

    def open(self, run: RunInfo) -> None:
        try:
            import wandb
        except ImportError:
            raise RuntimeError(f"the wandb package is not installed ({EXTRA})") from None
        train = self.profile.train
        self.run = wandb.init(
            project=train.wandb_project, entity=train.wandb_entity or None, mode=train.wandb_mode,
            id=run.run_id, resume="allow", name=run.name, tags=[t[:64] for t in run.tags], config=run.config,
            dir=str(self.run_dir),
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                                    save_code=False, init_timeout=60))
        log.info("train.log_to wandb: %s run %s (project %s)", train.wandb_mode, run.run_id, train.wandb_project)

    def epoch(self, step: int, wall_time: float, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def result(self, step: int, wall_time: float, key: str, label: str, scalars: dict[str, float]) -> None:
        self.run.summary.update({**scalars, f"settings/{key}": label})

    def close(self, status: str | None) -> None:
        run, self.run = self.run, None
        if run is not None:
            run.finish(exit_code=0 if status == "completed" else 1)
