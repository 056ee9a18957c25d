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
    finally:
        _forget_handled_interrupt()


def _forget_handled_interrupt() -> None:
    """CPython (3.11) marks a KeyboardInterrupt that leaves any ``eval`` or ``exec`` of a string as unhandled for
    the rest of the process, even when code further up catches it; at exit ``python -m`` then kills itself with
    SIGINT (a parent sees -2, not the 130 fairtui chose). ``collections.namedtuple`` evals a string, and importing
    torch makes hundreds, so a Ctrl-C during a lazy import hit this. A string eval that completes clears the mark."""
    try:
        eval("None")
    except KeyboardInterrupt:  # a second Ctrl-C in this instant: 130 all the same
        sys.exit(130)
