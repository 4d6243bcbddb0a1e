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
    from rich.console import Console

    from loadgen.cli.commands import app

    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C before a run's own handler is installed (start-up, preflight)
        Console(stderr=True).print("[red]error:[/red] interrupted before any load was sent", highlight=False)
        raise SystemExit(130) from None


def __getattr__(name: str) -> Any:
    if name == "app":  # ``from loadgen.cli import app``: the whole app, built on first use
        from loadgen.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
