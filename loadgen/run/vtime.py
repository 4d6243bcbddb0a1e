"""Virtual time: an asyncio event loop whose clock jumps to the next timer whenever nothing is ready.

The simulator and the load generator then run in one process and one loop,
and a level of minutes takes the CPU time of its events: the generator's
own work takes no time at all, so what it measures is the simulator's law
exactly (no scheduling noise, no client cost). That is what logic needs to
be tested (windows, floors, stop rules, plans, verdicts) and what a profile
needs to be tried before it is pointed at real hardware.

How: the loop's selector first polls without blocking; when no socket is
ready and the loop would sleep until its next timer, the clock moves to that
timer instead. Loopback TCP usually delivers a write to its peer inside
``send()``, so a poll right after sees it; on a busy machine the kernel may
defer the delivery to its softirq thread, and a jump then would overtake
bytes in flight (a stream's next chunk read a timeout later, or never). So
before each jump each connection of the loop's is checked at both ends (the
kernel's TCP counters: bytes one end sent against bytes the other received),
and while any bytes are in flight the loop waits for them in real time. Work handed to threads (``run_in_executor``) is
waited for in real time too, so a thread's answer is never overtaken by a
jump to a distant timeout.
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import struct
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
THREAD_POLL_S = 0.001  # while a thread works for the loop: real waits this long, the clock stands still
# struct tcp_info (linux/tcp.h): tcpi_bytes_received at offset 128, tcpi_bytes_sent at 200 (Linux >= 4.19)
_TCP_INFO_LEN = 208
_U64 = struct.Struct("=Q")


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if self._loop.threads_busy or timeout is None or self._bytes_in_flight():
            # a thread's answer and a deferred delivery arrive in real time; with no timer at all, only I/O
            # or a signal can wake us
            return list(super().select(timeout if timeout is None and not self._loop.threads_busy else THREAD_POLL_S))
        self._loop.advance(timeout)
        return []

    def _bytes_in_flight(self) -> bool:
        """Whether a socket of this loop sent bytes its peer, also of this loop, has not received yet (the
        kernel deferred the delivery)."""
        return in_flight(counted for key in self.get_map().values() if (counted := tcp_bytes(key.fileobj)))


Addresses = tuple[Any, Any]  # a TCP connection's (local, peer) addresses as one of its ends sees them


def in_flight(ends: Iterable[tuple[Addresses, tuple[int, int]]]) -> bool:
    """Whether bytes one end of a connection sent have not reached its other end: each end's (local, peer)
    addresses with its TCP counters (bytes sent, bytes received). Both ends' counters say it, whatever
    the ACKs are doing (an ACK may be delayed tens of ms; a sender's unacked count would wait it out)."""
    counters = dict(ends)
    return any(
        (other := counters.get((peer, local))) is not None and sent > other[1]
        for (local, peer), (sent, _) in counters.items()
    )


def tcp_bytes(fileobj: Any) -> tuple[Addresses, tuple[int, int]] | None:
    """A TCP socket's (local, peer) addresses and its bytes sent and received (``TCP_INFO``); None for
    anything else (the loop's self-pipe, a listening socket)."""
    if not isinstance(fileobj, socket.socket) or fileobj.type != socket.SOCK_STREAM:
        return None
    try:
        info = fileobj.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
        addresses = (fileobj.getsockname(), fileobj.getpeername())
    except OSError:  # not TCP, not connected, or closed meanwhile
        return None
    if len(info) < _TCP_INFO_LEN:
        return None
    received, sent = _U64.unpack_from(info, 128)[0], _U64.unpack_from(info, 200)[0]
    return addresses, (sent, received)


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
