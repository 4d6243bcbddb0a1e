"""Aiming a session at its target and running it: a URL, the simulator in its own process, or the
simulator in this process's loop in virtual time.

The library's one way to run a session to its results (``loadgen run`` and ``sweep``, ``plan
--predict-levels``, the tests of logic). How a stop is asked for is the caller's: the command line
turns Ctrl-C, SIGTERM and SIGHUP into the session's stop event (``interrupts``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace

from loadgen.errors import UsageError
from loadgen.results import Results
from loadgen.run.session import Session, SessionHooks, run_session
from loadgen.run.vtime import VirtualTimeLoop
from loadgen.sim.openai_app import SimOptions
from loadgen.sim.server import SimProcess, start_site
from loadgen.wire.loops import loop_factory
from loadgen.wire.target import normalize_base_url

SIM_URL = "sim"  # --url sim: the built-in simulator

Interrupts = Callable[[asyncio.AbstractEventLoop, asyncio.Event], AbstractContextManager[object]]


def no_interrupts(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> AbstractContextManager[object]:
    """Nothing but the session's own end stops it."""
    return contextlib.nullcontext()


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


def execute(
    url: str | None,
    sim: SimOptions | None,
    build: Callable[[str], Session],
    hooks_for: Callable[[Session], SessionHooks],
    *,
    virtual_time: bool = False,
    interrupts: Interrupts = no_interrupts,
) -> Results:
    """Aim a session at its target and run it: a URL, the simulator in its own process, or (virtual time)
    the simulator in this process's loop, its clock jumping from event to event. ``interrupts`` sets the
    session's stop event from outside (the CLI's signal handlers) while it runs."""
    if not virtual_time:
        with resolved_url(url, sim) as base_url:
            session = build(base_url)
            with asyncio.Runner(loop_factory=loop_factory(session.http.event_loop)) as loop:
                return loop.run(_run(session, hooks_for(session), interrupts))
    if url is not None and url != SIM_URL:
        raise UsageError("--virtual-time runs the built-in simulator in virtual time: give --url sim (or none)")

    async def in_virtual_time() -> Results:
        runner, port = await start_site(sim or SimOptions(), "127.0.0.1", 0)
        try:
            # every timestamp from this loop's clock: the one place a session is put in virtual time
            session = replace(build(normalize_base_url(f"http://127.0.0.1:{port}/v1")), virtual_time=True)
            if session.split:
                raise UsageError("--virtual-time runs in one process: no --workers, no --ray")
            return await _run(session, hooks_for(session), interrupts)
        finally:
            await runner.cleanup()

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as loop:
        return loop.run(in_virtual_time())


async def _run(session: Session, hooks: SessionHooks, interrupts: Interrupts) -> Results:
    stop = asyncio.Event()
    with interrupts(asyncio.get_running_loop(), stop):
        return await run_session(session, hooks, stop)
