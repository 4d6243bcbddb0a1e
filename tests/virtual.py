"""Run a profile against the simulator in virtual time, in this process: for tests of logic.

The same path as ``loadgen run|sweep --virtual-time`` (``loadgen.cli.session_flags``), with simulator
options a profile cannot set (prefix cache, held-back tokens, an API key) and the records kept.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from loadgen.inputs.profile import Profile
from loadgen.results import Results
from loadgen.run.assembly import TargetOptions, session_from_profile
from loadgen.run.launch import execute
from loadgen.run.session import SessionHooks
from loadgen.run.vtime import VirtualTimeLoop
from loadgen.sim.openai_app import SimOptions
from loadgen.sim.server import start_site
from loadgen.wire.records import RequestRecord

T = TypeVar("T")


def run_virtual(
    profile: Profile, sim: SimOptions | None = None, target: TargetOptions | None = None
) -> tuple[Results, list[RequestRecord]]:
    """The results and every request's record, the simulator running in the generator's loop."""
    records: list[RequestRecord] = []
    results = execute(
        None,
        sim or SimOptions(),
        lambda base_url: session_from_profile(profile, base_url, target or TargetOptions(), command="run"),
        lambda _: SessionHooks(on_record=records.append),
        virtual_time=True,
    )
    return results, records


def in_virtual_time(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a virtual-time loop (``loadgen.run.vtime``)."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as loop:
        return loop.run(main)


@contextlib.asynccontextmanager
async def serving(options: SimOptions) -> AsyncIterator[str]:
    """The simulator in this loop, for as long as the block runs; yields its base URL (ending in /)."""
    site, port = await start_site(options, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}/v1/"
    finally:
        await site.cleanup()
