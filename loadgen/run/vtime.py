"""Virtual time: an asyncio event loop whose clock jumps to the next timer whenever nothing is ready.

The simulator and the load generator then run in one process and one loop,
and a level of minutes takes the CPU time of its events: the generator's
own work takes no time at all, so what it measures is the simulator's law
exactly (no scheduling noise, no client cost). That is what logic needs to
be tested (windows, floors, stop rules, plans, verdicts) and what a profile
needs to be tried before it is pointed at real hardware.

How: the loop's selector first polls without blocking; when no socket is
ready and the loop would sleep until its next timer, the clock moves to that
timer instead. Loopback TCP delivers a write to its peer inside ``send()``,
so a poll right after sees it: no byte is in flight while time jumps. Work
handed to threads (``run_in_executor``) is waited for in real time, so a
thread's answer is never overtaken by a jump to a distant timeout.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
THREAD_POLL_S = 0.001  # while a thread works for the loop: real waits this long, the clock stands still


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if self._loop.threads_busy or timeout is None:
            # a thread's answer arrives in real time; with no timer at all, only I/O or a signal can wake us
            return list(super().select(THREAD_POLL_S if self._loop.threads_busy else timeout))
        self._loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """``asyncio.Runner(loop_factory=VirtualTimeLoop)``: ``loop.time()`` is virtual (starts at 0)."""

    def __init__(self) -> None:
        self._now = 0.0
        self.threads_busy = 0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += max(0.0, seconds)

    def run_in_executor(self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts) -> asyncio.Future[T]:
        self.threads_busy += 1
        future = super().run_in_executor(executor, func, *args)
        future.add_done_callback(self._thread_done)
        return future

    def _thread_done(self, _: asyncio.Future[Any] | Future[Any]) -> None:
        self.threads_busy -= 1
