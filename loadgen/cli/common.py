"""Shared CLI plumbing: consoles, exit codes, turning expected errors into one line."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from loadgen.errors import LoadgenError, UsageError

if TYPE_CHECKING:
    from loadgen.results import Results

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_USAGE = 2
EXIT_RUN_ERROR = 3

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Consoles:
    """Results go to stdout, progress and errors to stderr (so ``--json | jq`` works)."""

    out: Console
    err: Console


PIPE_WIDTH = 140  # rich's 80 columns when not on a terminal would squeeze the tables


def consoles() -> Consoles:
    out = Console()
    if not out.is_terminal:
        out = Console(width=PIPE_WIDTH)
    return Consoles(out=out, err=Console(stderr=True))


def fail(message: str, code: int) -> typer.Exit:
    """Print one red line on stderr and return the Exit to raise."""
    # escaped: a message quotes user input and names such as loadgen[ray], which are not markup
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def friendly_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn ``LoadgenError`` (a user mistake or an unusable target) into one line + exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except LoadgenError as exc:
            raise fail(str(exc), exc.exit_code) from None

    return wrapper


C = TypeVar("C", bound=str)


def choice(flag: str, value: str, allowed: tuple[C, ...]) -> C:
    """``value`` as a member of a closed set (its owner's ``get_args`` tuple), or one line naming ``flag``."""
    for member in allowed:
        if member == value:
            return member
    raise UsageError(f"{flag}: expected one of {' | '.join(allowed)}, got {value!r}")


def save_results(results: Results, output: Path, err: Console) -> bool:
    """Save the results at ``-o``, or where a fallback takes them, and say which; True when ``-o`` took them.

    The run is over and its data are in memory: a disk that filled or a folder that turned read-only
    since the run began costs the file's place, never the measurement. As a last resort the results
    go to standard output.
    """
    from loadgen.results import save_with_fallback

    try:
        where, why = save_with_fallback(results, output)
    except OSError as exc:
        err.print(
            f"error: -o {output}: cannot write ({exc.strerror}), nor any fallback: the results follow on stdout",
            highlight=False,
        )
        sys.stdout.write(results.to_json())
        return False
    if why is not None:
        err.print(f"error: -o {output}: cannot write ({why}); results saved to {where} instead", highlight=False)
        return False
    return True


def write_output(path: Path, text: str, flag: str = "-o") -> None:
    """Write a file the user asked for (a report, an imported results file, a gate's JUnit), atomically;
    a full disk or a folder turned read-only is one line naming the flag (``LoadgenError``, exit 3)."""
    from loadgen.results import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise LoadgenError(f"{flag} {path}: cannot write ({exc.strerror or type(exc).__name__})") from None


def check_writable(path: Path, flag: str = "-o") -> None:
    """Fail before the run, not after it: a result that cannot be saved is a lost result."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    probe = path.with_name(path.name + ".tmp")
    try:
        with open(probe, "w", encoding="utf-8") as f:
            f.write("")
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write there ({exc.strerror})") from None
    finally:
        probe.unlink(missing_ok=True)
