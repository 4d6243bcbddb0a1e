"""Shared CLI plumbing: consoles, exit codes, turning expected errors into one line."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console

from loadgen.errors import LoadgenError

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
    Console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
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
