"""How a command answers Ctrl-C, SIGTERM and SIGHUP: one set of handlers for the process's whole life.

A ``timeout`` wrapper, systemd stopping a unit or a cancelled CI job sends
TERM to the whole process group, often more than once; a user presses
Ctrl-C twice. Whatever the count, what was measured must be saved within a
bounded time. So the handlers are installed before anything else runs and
never handed back to the default (which would kill the process and lose the
data):

- before any load is sent, a signal ends the command at once
  (``StopRequested``: one line, exit 128 + the signal's number);
- while a session runs, the first signal sets its stop event (admission
  stops, in-flight requests get a bounded grace, the results are saved
  marked incomplete); repeats are absorbed, since the stop is already
  bounded; a third Ctrl-C is the escape hatch and aborts without saving;
- after the session, while the results are saved, signals are absorbed.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio  # only named: ``loadgen --help`` need not import it

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill / docker stop / CI timeout, SSH gone
ABORT_AFTER_INTS = 3  # Ctrl-C this many times while stopping: give up saving and exit now


class StopRequested(BaseException):
    """A stop signal that ends the command now: before any load was sent, or Ctrl-C repeated while stopping.

    Not a ``KeyboardInterrupt``: click would turn that into "Aborted!", exit 1.
    """

    def __init__(self, signum: int, abandoned: bool = False) -> None:
        super().__init__(signum)
        self.signum = signum
        self.abandoned = abandoned  # a run was stopping: its results are given up

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class StopSignals:
    """The process's stop signals and what each one does in the current phase."""

    def __init__(self) -> None:
        self.first: int | None = None  # the first stop signal received, if any
        self.ints = 0
        self._steering: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._absorbing = False

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)

    def ignore(self) -> None:
        """The command is done and the process is exiting: nothing left to stop."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    @contextlib.contextmanager
    def steering(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> Iterator[None]:
        """While a session runs: signals set ``stop``; afterwards (saving) they are absorbed."""
        self._steering = (loop, stop)
        if self.first is not None:  # one came earlier and asyncio swallowed its exception in a callback
            stop.set()
        try:
            yield
        finally:
            self._steering = None
            self._absorbing = True

    def rearm(self) -> None:
        """Between two sessions of one command (``tune``): a signal ends the command again, not absorbed, so
        the command's own cleanup (stopping the server it started) runs."""
        self._absorbing = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = self.first is None
        if first:
            self.first = signum
        if signum == signal.SIGINT:
            self.ints += 1
        if self._steering is not None:
            loop, stop = self._steering
            if self.ints >= ABORT_AFTER_INTS:
                raise StopRequested(signum, abandoned=True)
            if first:
                loop.call_soon_threadsafe(stop.set)  # the loop may be asleep in select: wake it
            return
        if self._absorbing:
            return
        raise StopRequested(signum)


SIGNALS = StopSignals()
