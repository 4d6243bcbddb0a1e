"""The ``loadgen`` command line: one typer app, thin commands.

Exit codes: 0 ok; 1 gate failed (SLO breach or regression); 2 usage error;
3 run or input error (endpoint unreachable, bad results file).

The app (``loadgen.cli.commands``) is built on first use, so importing one command
module (the simulator's own entry point imports ``serve-sim``'s) does not
import every other command's dependencies.
"""

from __future__ import annotations

from typing import Any


def main() -> None:
    from loadgen.cli.stop_signals import SIGNALS, StopRequested

    SIGNALS.install()  # first: a signal during start-up must not kill the process without a word
    try:
        from loadgen.cli.commands import app

        app()
    except StopRequested as stopped:  # before any load was sent, or Ctrl-C repeated while a run stopped
        if stopped.abandoned:
            _stderr("[red]error:[/red] aborted by repeated Ctrl-C; the results were not saved")
        else:
            _stderr(f"[red]error:[/red] stopped by {stopped.name} before it finished; nothing was written")
        raise SystemExit(128 + stopped.signum) from None
    finally:
        SIGNALS.ignore()  # exiting: the interpreter's shutdown would restore the defaults, and a late TERM
        # (a process group signalled again) would turn a saved run's exit 3 into 143


def _stderr(markup: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(markup, highlight=False)


def __getattr__(name: str) -> Any:
    if name == "app":  # ``from loadgen.cli import app``: the whole app, built on first use
        from loadgen.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
