"""The ``loadgen`` command line: one typer app, thin commands.

Exit codes: 0 ok; 1 gate failed (SLO breach or regression); 2 usage error;
3 run or input error (endpoint unreachable, bad results file).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from loadgen import __version__
from loadgen.cli import analyze, measure, profiles_cmd, report_cmd, run_cmd, sweep_cmd

app = typer.Typer(
    name="loadgen",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Load testing and SLO capacity planning for OpenAI-compatible streaming LLM endpoints.\n\n"
    "Exit codes: 0 ok; 1 gate failed; 2 usage error; 3 run or input error.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loadgen {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Load testing and SLO capacity planning for OpenAI-compatible streaming LLM endpoints."""


measure.register(app)
run_cmd.register(app)
sweep_cmd.register(app)
profiles_cmd.register(app)
analyze.register(app)
report_cmd.register(app)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C before a run's own handler is installed (start-up, preflight)
        Console(stderr=True).print("[red]error:[/red] interrupted before any load was sent", highlight=False)
        raise SystemExit(130) from None
