"""Drives the sans-IO engine in real time, on absolute deadlines.

Each step ends at ``start + duration``; the next step starts at that same
instant (back to back, as on a GPU), not at whenever the event loop woke up.
Chained relative sleeps would drift by the wake-up latency every step. A
step that starts more than ``OVERRUN_MS`` after its due time is counted as
an overrun: the simulator could not keep its law at that moment (it is the
bottleneck, not the simulated engine), and ``/metrics`` says so. The schedule
is kept through small lateness (the next step still starts on time, so the
mean step is exact); only when a step is more than ``RESYNC_MS`` late does the
schedule restart from now, rather than firing a burst of catch-up steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.engine import Engine, EngineConfig

OVERRUN_MS = 5.0
RESYNC_MS = 100.0


@dataclass(slots=True, kw_only=True)
class DriverStats:
    overruns: int = 0  # steps that started more than OVERRUN_MS late
    max_late_ms: float = 0.0  # worst lateness of a step start seen so far
    # what the streams see between their tokens of back-to-back steps: the step as realised (the law, or
    # later), once per stream with a token in both steps, so a step's weight is the streams it carries
    gap_ms_total: float = 0.0
    gaps: int = 0


class EngineDriver:
    """Owns one ``Engine`` and the per-sequence token queues fed from it."""

    def __init__(self, config: EngineConfig, clock: Callable[[], float] | None = None) -> None:
        self.engine = Engine(config=config)
        self.stats = DriverStats()
        self._clock = clock
        self._queues: dict[int, asyncio.Queue[int]] = {}
        self._ids = itertools.count()
        self._wake = asyncio.Event()

    def _now_ms(self) -> float:
        clock = self._clock or asyncio.get_running_loop().time
        return clock() * 1000.0

    def submit(
        self, *, prompt_tokens: int, max_tokens: int, adapter: str | None = None
    ) -> tuple[int, asyncio.Queue[int]]:
        """Queue a sequence (a LoRA adapter's, or the base model's); its queue receives its tokens."""
        seq_id = next(self._ids)
        queue: asyncio.Queue[int] = asyncio.Queue()
        self._queues[seq_id] = queue
        now = self._now_ms()
        self.engine.submit(seq_id, prompt_tokens=prompt_tokens, max_tokens=max_tokens, now_ms=now, adapter=adapter)
        self._wake.set()
        return seq_id, queue

    def release(self, seq_id: int) -> None:
        """Forget a sequence: finished, or its client went away (then cancel it)."""
        if self._queues.pop(seq_id, None) is not None:
            self.engine.cancel(seq_id)

    async def run(self) -> None:
        """The engine loop; runs until cancelled."""
        due_ms: float | None = None  # when the next step should start (back to back)
        delivered_ms: float | None = None  # when the previous step's tokens were handed out
        previous: frozenset[int] = frozenset()  # the sequences that got a token in that step
        while True:
            now = self._now_ms()
            start = now
            if due_ms is not None:
                late = now - due_ms
                if late > OVERRUN_MS:
                    self.stats.overruns += 1
                if late <= RESYNC_MS:
                    start = due_ms  # keep the absolute schedule: no drift
                self.stats.max_late_ms = max(self.stats.max_late_ms, late)
            step = self.engine.next_step(start)
            if step is None:
                due_ms = delivered_ms = None
                await self._idle(now)
                continue
            await asyncio.sleep(max(0.0, step.end_ms - self._now_ms()) / 1000.0)
            for seq_id, n in zip(step.emitted, step.counts or itertools.repeat(1)):
                queue = self._queues.get(seq_id)
                if queue is not None:
                    queue.put_nowait(n)
            now = self._now_ms()
            if delivered_ms is not None:
                streams = len(previous.intersection(step.emitted))
                self.stats.gap_ms_total += (now - delivered_ms) * streams
                self.stats.gaps += streams
            delivered_ms, due_ms, previous = now, step.end_ms, frozenset(step.emitted)

    async def _idle(self, now_ms: float) -> None:
        self._wake.clear()
        wake_at = self.engine.wake_at_ms()
        if wake_at is None:
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, wake_at - now_ms) / 1000.0)
