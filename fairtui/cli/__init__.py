"""The command line: one module per command, each a thin shell over the library.

Importing this module must stay cheap: no torch, no Textual (a test checks).
"""

from __future__ import annotations

import os
import sys

from typing import List

import typer

from fairtui.cli import compare as _compare
from fairtui.cli import eval as _eval
from fairtui.cli import export as _export
from fairtui.cli import import_ as _import
from fairtui.cli import judge as _judge
from fairtui.cli import ls as _ls
from fairtui.cli import manage as _manage
from fairtui.cli import plot as _plot
from fairtui.cli import resume as _resume
from fairtui.cli import run as _run
from fairtui.cli import show as _show
from fairtui.cli import sweep as _sweep
from fairtui.cli import tune as _tune

app = typer.Typer(add_completion=False, no_args_is_help=False, rich_markup_mode=None,
                  help="fairtui: fairness-aware adversarial training runs, from the terminal.")

app.command("run", help=_run.HELP)(_run.run)
app.command("resume", help=_resume.HELP)(_resume.resume)
app.command("eval", help=_eval.HELP)(_eval.evaluate)
app.command("import", help=_import.HELP)(_import.import_model)
app.command("ls", help=_ls.HELP)(_ls.ls)
app.command("show", help=_show.HELP)(_show.show)
app.command("compare", help=_compare.HELP)(_compare.compare)
app.command("judge", help=_judge.HELP)(_judge.judge)
app.command("export", help=_export.HELP)(_export.export)
app.command("plot", help=_plot.HELP)(_plot.plot)
app.command("stop", help=_manage.STOP_HELP)(_manage.stop)
app.command("rm", help=_manage.RM_HELP)(_manage.rm)
app.command("reindex", help=_manage.REINDEX_HELP)(_manage.reindex)
app.command("tag", help=_manage.TAG_HELP)(_manage.tag)
app.command("note", help=_manage.NOTE_HELP)(_manage.note)
app.command("sweep", help=_sweep.HELP)(_sweep.sweep)
app.command("tune", help=_tune.HELP)(_tune.tune)
app.command("queue-worker", hidden=True)(_sweep.queue_worker)


def version_line() -> str:
    """What to paste into a bug report: fairtui's version and commit, Python, torch and the platform (torch's
    version from its package metadata: nothing heavy is imported)."""
    import platform
    from importlib import metadata

    from engine.contract.code import code_version
    from fairtui import __version__

    import subprocess
    from pathlib import Path

    code = code_version()
    dirty = code.get("git_dirty")
    try:  # the engine's flag covers engine/; a bug report is about fairtui/ too
        root = Path(__file__).resolve().parents[2]
        dirty = dirty or bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "engine",
                                              "fairtui"], capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    commit = f" (commit {code['git_commit'][:7]}{', with uncommitted changes' if dirty else ''})" \
        if code.get("git_commit") else ""
    versions = []
    for package in ("torch", "torchvision", "textual"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} not installed")
    return (f"fairtui {__version__}{commit}; Python {platform.python_version()}; {', '.join(versions)}; "
            f"{platform.platform()}")


def _version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print fairtui's version, commit, Python, torch and platform, and exit"),
          home: str = typer.Option(None, "--home", help="home folder (default: $FAIRTUI_HOME, else ./.fairtui)"),
          profiles: str = typer.Option(None, "--profiles", help="the folder the launch dialog lists"),
          per_gpu: int = typer.Option(None, "--per-gpu", min=1, help="runs at once on each GPU, for every "
                                      "worker of the home (stored with its queue; default: the home's, else 1)"),
          results: List[str] = typer.Option([], "--results", help="a folder of committed run files, listed beside "
                                            "the home's runs, read only (repeatable)")) -> None:
    """Without a command: open the terminal app."""
    if home:  # `fairtui --home DIR COMMAND` means the same as `fairtui COMMAND --home DIR`
        os.environ["FAIRTUI_HOME"] = home
    if ctx.invoked_subcommand is None:
        from fairtui.app import run_app

        if per_gpu is not None:  # one limit per home: every worker of it uses it from its next tick
            from fairtui.launch.queue import set_home_limit
            from fairtui.runs.home import resolve_home

            set_home_limit(resolve_home(home), per_gpu)
        for folder in results:
            if not os.path.isdir(folder):
                raise typer.BadParameter(f"{folder}: no such folder (it should hold <profile>/<run-id>/ run files)",
                                         param_hint="--results")
        run_app(home=home, profiles_dir=profiles, results=results)


class _Watched:
    """A stream that remembers whether anything was written to it, and its last line (for `--json`'s answer)."""

    def __init__(self, stream):
        self.stream, self.written, self.last = stream, False, ""

    def write(self, text: str) -> int:
        if text:
            self.written = True
            lines = [line for line in text.strip().splitlines() if line.strip()]
            self.last = lines[-1] if lines else self.last
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def main() -> None:
    """The command line. With ``--json`` every path answers with exactly one document on stdout: a command that
    ended without writing one (an error, a refusal, nothing to do) writes ``{"error": LINE, "exit": CODE}``, LINE
    being what it said on stderr (``"error"`` is null on success)."""
    if "--json" not in sys.argv[1:]:
        return _main()
    out, err = _Watched(sys.stdout), _Watched(sys.stderr)
    sys.stdout, sys.stderr = out, err
    code = 0
    try:
        _main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        raise
    except KeyboardInterrupt:
        code = 130
        raise
    except BaseException:  # a crash: the process exits 1, and so does its document
        code = 1
        raise
    finally:
        sys.stdout, sys.stderr = out.stream, err.stream
        if not out.written:
            import json

            said = err.last.removeprefix("fairtui: ") if err.last else None
            print(json.dumps({"error": said if code else None, "message": None if code else said, "exit": code}))


def _main() -> None:
    from fairtui.runs.home import EngineRunning, HomeNotAFolder, ReadOnlyHome

    try:
        os.getcwd()
    except FileNotFoundError:  # before anything exists: a run made here could not start its engine
        print("fairtui: the working directory no longer exists (deleted or moved); cd to a folder that exists",
              file=sys.stderr)
        sys.exit(2)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except HomeNotAFolder as err:
        print(f"fairtui: {err}", file=sys.stderr)
        sys.exit(2)
    except EngineRunning as err:  # a second engine for a run that one trains (a race with another start)
        print(f"fairtui: {err}", file=sys.stderr)
        sys.exit(2)
    except ReadOnlyHome as err:  # a command that must write, on a home it cannot write: one line, exit 1
        print(f"fairtui: {err.strerror}", file=sys.stderr)
        sys.exit(1)
    except OSError as err:
        import errno

        if err.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk or quota: one line, nothing half-written
            import shutil

            where = err.filename or "the home folder"
            try:
                free = shutil.disk_usage(os.path.dirname(os.path.abspath(where)) or ".").free
                room = f" ({free / 2**20:.0f} MiB free)"
            except OSError:
                room = ""
            print(f"fairtui: no space left to write {where}{room}: {err.strerror}; free some and run the "
                  "command again", file=sys.stderr)
            sys.exit(1)
        if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        print(f"fairtui: cannot write {err.filename or 'to the home folder'}: {err.strerror} (a read-only home "
              "folder? reading commands such as ls, show, compare and export still work)", file=sys.stderr)
        sys.exit(1)
