import signal
import sys
from pathlib import Path


def _stop_while_starting(signum, frame):
    """Ctrl-C or SIGTERM while the engine is still importing (seconds on a busy CPU): no traceback, no lost run.
    The stop is left in the run folder (stop.requested), where the engine looks once it can act on it: it then
    records the run stopped before training began (engine.entry.train_run)."""
    if len(sys.argv) > 2 and sys.argv[1] == "train":
        try:
            (Path(sys.argv[2]) / "stop.requested").touch()
        except OSError:
            pass


signal.signal(signal.SIGINT, _stop_while_starting)  # until engine.training.process.StopFlag.install takes over
signal.signal(signal.SIGTERM, _stop_while_starting)

from engine.entry.run import main  # noqa: E402 (after the handlers: the imports are what takes the time)

sys.exit(main())
