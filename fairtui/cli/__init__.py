"""The command line: one module per command, each a thin shell over the library.

Importing this module must stay cheap: no torch, no Textual (a test checks).
"""

from __future__ import annotations

import sys

import typer

from fairtui.cli import eval as _eval
from fairtui.cli import resume as _resume
from fairtui.cli import run as _run

app = typer.Typer(add_completion=False, no_args_is_help=False, rich_markup_mode=None,
                  help="fairtui: fairness-aware adversarial training runs, from the terminal.")

app.command("run", help=_run.HELP)(_run.run)
app.command("resume", help=_resume.HELP)(_resume.resume)
app.command("eval", help=_eval.HELP)(_eval.evaluate)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
