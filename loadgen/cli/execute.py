"""Running a measurement from the CLI: output checks, the simulator target, Ctrl-C handling."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from loadgen.cli.progress import RichProgress
from loadgen.client import HttpOptions
from loadgen.errors import UsageError
from loadgen.observe import LevelObserver, NullObserver
from loadgen.results import Results
from loadgen.session import Session, SessionHooks, run_session
from loadgen.sim.openai_app import SimOptions
from loadgen.sim.server import SimProcess
from loadgen.target import normalize_base_url

SIM_URL = "sim"


def choice(flag: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise UsageError(f"{flag}: expected one of {' | '.join(allowed)}, got {value!r}")
    return value


def check_writable(path: Path) -> None:
    """Fail before the run, not after it: a result that cannot be saved is a lost result."""
    probe = path.with_name(path.name + ".tmp")
    try:
        with open(probe, "w", encoding="utf-8") as f:
            f.write("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"-o {path}: cannot write there ({exc.strerror})") from None


def parse_extra_body(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--extra-body: not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise UsageError("--extra-body: expected a JSON object, e.g. '{\"ignore_eos\": true}'")
    return value


def http_options(timeout: float, insecure: bool, transport: str) -> HttpOptions:
    if not timeout > 0:
        raise UsageError(f"--timeout: must be > 0 s, got {timeout}")
    kind = choice("--transport", transport, ("aiohttp", "httpx"))
    return HttpOptions(timeout_s=timeout, verify_tls=not insecure, transport=kind)  # type: ignore[arg-type]


@contextlib.contextmanager
def resolved_url(url: str | None, sim: SimOptions | None = None) -> Iterator[str]:
    """A normalized base URL; ``sim`` (or no URL with a simulator law) starts the built-in simulator.

    The simulator runs in its own process so it never competes with the load
    generator for the interpreter lock.
    """
    if url is not None and url != SIM_URL:
        yield normalize_base_url(url)
        return
    with SimProcess(sim or SimOptions()) as server:
        yield normalize_base_url(server.base_url)


def progress_observer(console: Console, quiet: bool) -> LevelObserver:
    return RichProgress(console) if not quiet and sys.stderr.isatty() else NullObserver()


def run_with_interrupt(session: Session, hooks: SessionHooks) -> Results:
    """Run the session; the first Ctrl-C stops admitting and drains, a second one aborts."""

    async def main() -> Results:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def first_interrupt() -> None:
            stop.set()
            loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C aborts at once

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, first_interrupt)
        return await run_session(session, hooks, stop)

    return asyncio.run(main())
