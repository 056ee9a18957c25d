"""fairtui's training and evaluation engine.

Run as its own process (``python -m engine train RUN_DIR``); it talks to the
world only through its run folder and its exit code. Importing this package is
cheap: torch is imported by the modules that need it.

Its packages, top to bottom (each imports only those below it; pyproject.toml's
import-linter layers hold it): entry (the process entry points), training (the
loop and what it keeps), evaluation (per-class measurement), methods and attacks,
data and models, runtime (device, seeding, checkpoints, provenance, progress),
contract (what the engine and the app agree on, torch-free). Plugins use
engine.contract and engine.methods, which do not move.
"""

__version__ = "0.1.0"
