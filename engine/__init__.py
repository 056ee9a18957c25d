"""fairtui's training and evaluation engine.

Run as its own process (``python -m engine train RUN_DIR``); it talks to the
world only through its run folder and its exit code. Importing this package is
cheap: torch is imported by the modules that need it.
"""

__version__ = "0.1.0"
