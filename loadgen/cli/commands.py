"""The ``loadgen`` typer app: every command registered (imported only when the CLI runs)."""

from __future__ import annotations

from typing import Annotated

import typer

from loadgen import __version__
from loadgen.cli import import_cmd, plan_cmd, profiles_cmd, report_cmd, run_cmd, serve_sim_cmd, sweep_cmd

app = typer.Typer(
    name="loadgen",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Load testing and SLO capacity planning for OpenAI-compatible streaming LLM endpoints.\n\n"
    "Exit codes: 0 ok; 1 gate failed; 2 usage error (a flag, a missing file); 3 the run failed or cannot be trusted.",
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


serve_sim_cmd.register(app)
run_cmd.register(app)
sweep_cmd.register(app)
profiles_cmd.register(app)
plan_cmd.register(app)
report_cmd.register(app)
import_cmd.register(app)
