"""The ``loadgen`` typer app: every command listed, each one's module imported only when it runs.

``loadgen --help`` lists every command; building them all would import
aiohttp, httpx, numpy and the planner (about a second) just to print their
one-line summaries. The root group therefore knows each command by its
module and summary, shows a stand-in for the listing, and imports the module
when the command itself is wanted: to run, for its own ``--help`` or for
completion. ``tests/cli/test_lazy_commands.py`` checks each summary against
the command's docstring.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, cast

import typer
import typer.core
import typer.main

from loadgen import __version__

# the base of the parser's errors: found from typer's public BadParameter, since where click lives (its own
# package, or vendored privately inside typer) depends on typer's version
ClickException: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


@dataclass(frozen=True, slots=True)
class LazyCommand:
    module: str  # under loadgen.cli; its ``register(app)`` adds the command
    summary: str  # the first line of the command's help, shown in ``loadgen --help``


COMMANDS: dict[str, LazyCommand] = {
    "serve-sim": LazyCommand(
        "serve_sim_cmd", "Serve the simulated continuous-batching engine as an OpenAI-compatible endpoint."
    ),
    "run": LazyCommand("run_cmd", "Run one load level and write a results file."),
    "sweep": LazyCommand(
        "sweep_cmd", "Sweep load levels from a profile and write a results file (checkpointed after every level)."
    ),
    "plan": LazyCommand(
        "plan_cmd",
        "Fit the step law, find the largest batch under the SLO, and size replicas for a target QPS (or a fleet).",
    ),
    "report": LazyCommand(
        "report_cmd",
        "Capacity report: SLO verdicts, the fitted law, max batch, replicas, caveats (terminal, Markdown, HTML, CSV).",
    ),
    "gate": LazyCommand("gate_cmd", "CI gate: exit 0 pass, 1 breach or regression, 2 usage error, 3 untrusted run."),
    "compare": LazyCommand(
        "report_cmd", "Side-by-side table of two or more results, with direction-aware deltas and significance marks."
    ),
    "import": LazyCommand(
        "import_cmd", "Turn numbers from another tool into a results file that plan, report and compare read."
    ),
    "tune": LazyCommand(
        "tune_cmd",
        "Search the server's batch cap (and token budget) by restarting it at the plan's answer until it holds.",
    ),
    "profile": LazyCommand("profiles_cmd", "List, show and validate workload profiles."),
    "export": LazyCommand(
        "export_cmd",
        "Export levels or per-request records as CSV, Parquet or llm-d benchmark reports (docs/export.md).",
    ),
}


def load_command(name: str) -> typer.core.TyperCommand | typer.core.TyperGroup:
    """Import a command's module and build its command (typer reads the function's signature)."""
    module = importlib.import_module(f"loadgen.cli.{COMMANDS[name].module}")
    holder = typer.Typer()
    holder.callback()(lambda: None)  # a callback keeps typer from collapsing a one-command app into that command
    module.register(holder)
    group = typer.main.get_command(holder)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands[name]
    assert isinstance(command, (typer.core.TyperCommand, typer.core.TyperGroup))
    return command


class _ParserError(Protocol):
    """What a click exception carries (click's own classes are private to typer here)."""

    exit_code: int
    ctx: Any

    def format_message(self) -> str: ...


class LazyGroup(typer.core.TyperGroup):
    """Lists every command from ``COMMANDS``; imports one only when it is run, asked for help or completed.

    ``commands`` holds a stand-in per command (summary only), which is what
    the root's help and click's "did you mean" read. (Click's context and
    formatter are typed ``Any`` here: typer vendors click privately.)
    """

    _listing = False

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, lazy in COMMANDS.items():
            self.commands[name] = typer.core.TyperCommand(name, help=lazy.summary, short_help=lazy.summary)
        self._loaded: dict[str, typer.core.TyperCommand | typer.core.TyperGroup] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return self.commands[cmd_name]
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = load_command(cmd_name)
        return self._loaded[cmd_name]

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """typer's ``main``, except that an error its parser finds (a bad value for a flag, an unknown flag, a
        missing one) is one line, as the commands' own are, not a box wrapped to the terminal's width:
        ``error: Invalid value for '--transport': 'nope' is not one of ...; see 'loadgen run --help'``."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except ClickException as exc:
            error = cast(_ParserError, exc)
            if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
                from loadgen.cli.common import fail

                hint = f"; see '{error.ctx.command_path} --help'" if getattr(error, "ctx", None) is not None else ""
                message = " ".join(_message(exc).replace("Value error, ", "").split()).rstrip(".")
                fail(message + hint, error.exit_code)
            raise SystemExit(error.exit_code) from None
        except typer.Abort:
            raise SystemExit(1) from None
        raise SystemExit(code if isinstance(code, int) else 0)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True  # the root's help needs each command's summary, not the command
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


SUGGEST_CUTOFF = 0.8  # click suggests at 0.6, which offered --insecure for a misspelt --concurrency


def _message(exc: Exception) -> str:
    """The parser's message; for an unknown flag, a suggestion only where the flag is nearly one of the command's."""
    error = cast(_ParserError, exc)
    name, possible = getattr(exc, "option_name", None), getattr(exc, "possibilities", None)
    if type(exc).__name__ != "NoSuchOption" or not name or possible is None:
        return error.format_message()
    close = difflib.get_close_matches(name, sorted(possible), n=1, cutoff=SUGGEST_CUTOFF)
    return f"No such option: {name}" + (f" (did you mean {close[0]}?)" if close else "")


app = typer.Typer(
    name="loadgen",
    cls=LazyGroup,
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
        bool,
        typer.Option("--version", callback=_version, is_eager=True, metavar="", help="Print the version and exit."),
    ] = False,
) -> None:
    """Load testing and SLO capacity planning for OpenAI-compatible streaming LLM endpoints."""
