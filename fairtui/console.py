"""The ``fairtui`` command's entry point. Ctrl-C while the command line's modules load (typer, rich and the
commands take a moment on a busy machine) ends the command quietly with exit 130, as it does once they are
loaded: no ``KeyboardInterrupt`` traceback."""

import sys


def main() -> None:
    try:
        from fairtui.cli import main as command_line

        command_line()
    except KeyboardInterrupt:
        sys.exit(130)
