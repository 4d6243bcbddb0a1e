"""Runs one load level: closed loop (N workers) or open loop (a schedule fixed in advance).

Timing rules (wrk2): every request carries ``t_intended`` and latency is
measured from it, so a slow server cannot hide its queue. Sleeps target
absolute deadlines from a fixed ``t0``; chained relative sleeps drift.

The clock is ``time.monotonic`` (nanosecond resolution, system-wide on
Linux, so worker processes share it), not the event loop's ``time()``: an
alternative loop such as uvloop caches it at millisecond resolution, which
would quantise every inter-token gap.

Level timeline: ``t0`` … ``t0 + warmup`` (excluded) … ``t_stop`` (the level
stops admitting; the measured window ends) … drain (in-flight requests may
finish, up to ``drain_s``, then are cancelled; they are outside the window).
With a request budget and no duration, the window ends at the last
completion instead, so every request after the warm-up counts.

A closed loop's first round (each client's first request) is sent while the
ramp is still starting clients: its prefills crowd each other in a batch not
yet at its concurrency. With a warm-up, that round is warm-up wherever it
ends: its completions and tokens count toward the window's rates, its
latencies are not sampled (a warm-up shorter than one loaded request read a
TTFT p95 1.5x the steady level's from them).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import replace

import httpx
import numpy as np

from loadgen.errors import ErrorKind
from loadgen.histogram import LatencyHistogram
from loadgen.level.result import WINDOW_LIFETIMES, LevelResult
from loadgen.load import LevelPlan, open_loop_offsets
from loadgen.quantity import Metric
from loadgen.run.believable import believable
from loadgen.run.metrics import LevelRecorder
from loadgen.run.observe import LevelObserver, LoadSnapshot, NullObserver
from loadgen.run.requests import Conversation, RequestFactory, Workload
from loadgen.run.scrape import MetricsScraper
from loadgen.wire.records import Clock, RequestRecord
from loadgen.wire.send import send_request

PROGRESS_INTERVAL_S = 0.5
LOOP_PROBE_INTERVAL_S = 0.05  # the loop-lag probe's timer: 20 wake-ups a second; an idle loop's wake-up costs ~150 us
LOOP_PROBE_HELD = 4096  # loop-lag samples held before they are recorded (a histogram call each cost ~1.5% CPU)
CONNECT_BACKOFF_S = (0.05, 1.0)  # a closed-loop client's pause after a connect failure: first, longest
FLOOR_MARGIN = 1.1  # aim a little past the request floor: the completion rate is an estimate
MAX_FLOOR_S = 300.0  # a request floor never keeps one level's window open longer than this
GONE_AFTER_S = 5.0  # connections refused for this long: the target is gone, the level stops
GONE_AT_END_S = 1.0  # connections still refused when the level ends, for this long: the target is gone too


async def run_level(
    plan: LevelPlan,
    workload: Workload,
    http: httpx.AsyncClient,
    *,
    clock: Clock | None = None,
    observer: LevelObserver | None = None,
    stop: asyncio.Event | None = None,
    scraper: MetricsScraper | None = None,
    t0: float | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    real_time: bool = True,
) -> LevelResult:
    """Run one level and return its result (``complete=False`` if ``stop`` was set).

    ``on_record`` sees every finished request (e.g. to write raw records). In
    virtual time (``real_time=False``, ``loadgen.run.vtime``) the generator's own
    CPU and core wait are not measured: its work takes no time there.
    """
    level = _Level(
        plan,
        workload,
        http,
        clock or time.monotonic,
        observer or NullObserver(),
        stop or asyncio.Event(),
        scraper,
        t0,
        on_record,
        real_time,
    )
    if not real_time:
        return await level.run()
    # Everything alive before the level (the interpreter's modules, a test runner's heap: tens of thousands of
    # objects) is left out of the collector's scans while it runs: a full collection traversed all of it,
    # 30-80 ms in one pause, and sends and timestamps due then were that late (a send-lag p99 over 10 ms
    # made a validation run on vLLM untrusted). Objects made during the level are collected as before.
    gc.freeze()  # a splice of the collector's lists, no scan and no pause
    try:
        return await level.run()
    finally:
        gc.unfreeze()  # back into the oldest generation: collected as usual from here


class _Level:
    def __init__(
        self,
        plan: LevelPlan,
        workload: Workload,
        http: httpx.AsyncClient,
        clock: Clock,
        observer: LevelObserver,
        stop: asyncio.Event,
        scraper: MetricsScraper | None,
        t0: float | None,
        on_record: Callable[[RequestRecord], None] | None,
        real_time: bool,
    ) -> None:
        self.plan = plan
        self.real_time = real_time
        self.on_record = on_record
        self.http = http
        self.clock = clock
        self.observer = observer
        self.stop = stop
        self.scraper = scraper
        self.api = workload.api
        self.convention = workload.metric_convention
        self.path = workload.path
        batch = plan.load.batch  # a pooling sweep's levels each send their own batch size
        self.factory = RequestFactory(workload if batch is None else replace(workload, batch=batch), plan.seed)
        self.t0 = clock() if t0 is None else t0
        self.t_stop = math.inf if plan.duration_s is None else self.t0 + plan.warmup_s + plan.duration_s
        self.recorder = LevelRecorder(
            plan.load,
            self.t0 + plan.warmup_s,
            window_end=self.t_stop,
            lag_threshold_ms=plan.lag_threshold_ms,
            goodput_limits_ms=dict(plan.goodput_limits_ms) or None,
        )
        self.tickets = itertools.count() if plan.requests is None else iter(range(plan.requests))
        self.interrupted = False
        self._cpu_start: float | None = None
        self._cpu_end: float | None = None
        self._loop_lag = LatencyHistogram()
        self._loop_lag_held: list[float] = []  # recorded LOOP_PROBE_HELD at a time, and at the level's end
        self._wait_start: float | None = None  # runnable-but-waiting seconds at the window's start
        self._wait_end: float | None = None
        self._outage = Outage()
        self.gone = asyncio.Event()  # the target stopped answering: the level stops (and the session after it)

    def stopping(self) -> bool:
        if self.interrupted:
            return True
        now = self.clock()
        return now >= self.t_stop and not self._extend_for_floor(now)

    def _extend_for_floor(self, now: float) -> bool:
        """At the planned end, keep the window open until ``min_requests`` completed in it and were timed
        (a cohort of requests due together counted once; the first round of a closed loop is not timed) and it spans ``WINDOW_LIFETIMES`` mean request lifetimes.

        A percentile needs a sample count, not a duration, and a window of one
        or two lifetimes quantises counts and throughput by whole requests. Checked
        synchronously where the level would stop (and before a late record is
        added), so no client leaves before the decision, and again at each new end,
        on the rate measured so far. The window stays open at most ``MAX_FLOOR_S``,
        and not at all past the planned end when that rate cannot reach the floor
        within it; a level still short is flagged by its trust verdict. Open loop and worker
        processes are sized before the level instead (``loadgen.run.session.with_request_floor``): their
        schedules and windows are fixed in advance.
        """
        floor = self.plan.min_requests
        if not floor or self.plan.load.kind != "concurrency" or not math.isfinite(self.t_stop):
            return False
        done, elapsed = self.recorder.independent_samples, now - self.recorder.window_start
        e2e_us = self.recorder.histograms[Metric.E2E].mean_us()
        lifetimes_s = WINDOW_LIFETIMES * e2e_us / 1e6 if e2e_us else 0.0
        if (done >= floor and elapsed >= lifetimes_s) or elapsed >= MAX_FLOOR_S:
            return False
        rate = done / elapsed if done and elapsed > 0 else 0.0
        if rate and done < floor and elapsed + (floor - done) / rate > MAX_FLOOR_S:
            return False  # the floor cannot be met within the cap at this rate: more time buys no verdict
        extra = FLOOR_MARGIN * (floor - done) / rate if rate and done < floor else max(self.plan.duration_s or 1.0, 1.0)
        extra = max(extra, FLOOR_MARGIN * lifetimes_s - elapsed)
        self.t_stop = min(now + extra, self.recorder.window_start + MAX_FLOOR_S)
        self.recorder.window_end = self.t_stop
        return True

    def take_ticket(self) -> bool:
        return next(self.tickets, None) is not None

    async def run(self) -> LevelResult:
        self.observer.on_level_start(self.plan.load, self.plan.planned_s)
        await _sleep_until(self.t0, self.clock)
        drive = asyncio.create_task(self._closed() if self.plan.load.kind == "concurrency" else self._open())
        helpers = [asyncio.create_task(self._loop_probe())]
        if not isinstance(self.observer, NullObserver):  # live numbers cost percentiles each tick: not for nobody
            helpers.append(asyncio.create_task(self._progress()))
        if self.real_time:
            helpers.append(asyncio.create_task(self._cpu_window()))
        if self.scraper is not None:
            scrape = self.scraper.run(self.recorder.window_start, lambda: self.t_stop, self.clock)
            helpers.append(asyncio.create_task(scrape))
        try:
            await self._supervise(drive)
        finally:
            for task in (drive, *helpers):
                task.cancel()
            await asyncio.gather(drive, *helpers, return_exceptions=True)
        failure = drive.exception() if drive.done() and not drive.cancelled() else None
        if failure is not None:
            raise failure  # a bug, not a request failure
        end = self.clock()
        if self._outage.lasting(end) >= GONE_AT_END_S:
            self.gone.set()  # refused to the end: the next level would meet the same closed port
        gone = self.gone.is_set()  # the server died in this level: a partial level, and the session stops
        server = self.scraper.sample() if self.scraper else None
        result = self.recorder.finish(end, server=server, complete=not self.interrupted and not gone)
        result = replace(result, outage_s=self._outage.total(end), target_gone=gone)
        if self._cpu_start is not None:
            result = replace(result, client_cpu_s=(self._cpu_end or time.process_time()) - self._cpu_start)
        if self._wait_start is not None:
            wait_end = self._wait_end if self._wait_end is not None else _runqueue_wait_s()
            if wait_end is not None:
                result = replace(result, runqueue_wait_s=wait_end - self._wait_start)
        self._record_loop_lag()
        p99 = self._loop_lag.percentile_us(99)
        if p99 is not None:
            result = replace(result, loop_lag_p99_ms=p99 / 1000.0)
        self.observer.on_level_end(result)
        return result

    async def _supervise(self, drive: asyncio.Task[None]) -> None:
        """Wait for the level to end; on interrupt or past the drain limit, cut in-flight requests."""
        stop_wait = asyncio.create_task(_first(self.stop, self.gone))
        t_interrupt = math.inf
        try:

            def limit() -> float:  # read afresh: a request floor may move t_stop while we wait
                return (
                    t_interrupt + self.plan.interrupt_grace_s if self.interrupted else self.t_stop + self.plan.drain_s
                )

            while not drive.done():
                timeout = None if math.isinf(limit()) else max(0.0, limit() - self.clock())
                waiters = {drive} if self.interrupted else {drive, stop_wait}
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if drive.done():
                    break
                if stop_wait.done() and not self.interrupted:
                    self.interrupted = True
                    t_interrupt = self.clock()
                    self.recorder.close_window(t_interrupt)
                elif self.clock() >= limit():
                    drive.cancel()
                    await asyncio.gather(drive, return_exceptions=True)
        finally:
            stop_wait.cancel()
        if not math.isfinite(self.recorder.window_end) and not self.interrupted:
            self.recorder.close_window(self.clock())

    async def _closed(self) -> None:
        n = int(min(self.plan.load.value, self.plan.requests or math.inf))  # no idle clients past the budget
        async with asyncio.TaskGroup() as tg:
            for k in range(n):
                tg.create_task(self._worker(k, self.t0 + self.plan.ramp_up_s * k / n))

    async def _worker(self, k: int, t_start: float) -> None:
        """One closed-loop client. After a connect failure it backs off (50 ms doubling to 1 s): a dead
        target would otherwise be hammered thousands of times a second and drown the count.

        With multi-turn sessions it carries one conversation at a time and thinks (an exponential pause, its
        own seeded stream) between turns; the next turn is due when the thinking ends."""
        await _sleep_until(t_start, self.clock)
        backoff = 0.0
        conversation = Conversation(self.factory.turns) if self.factory.turns > 1 else None
        think = np.random.default_rng([self.plan.seed, 2, k])
        ramp_round = self.plan.warmup_s > 0  # this client's first request is warm-up (module docstring)
        while not self.stopping() and self.take_ticket():
            t_intended = self.clock()
            self.recorder.due(t_intended)
            record = await self._one(t_intended, None, conversation=conversation, sampled=not ramp_round)
            ramp_round = False
            if record.error is ErrorKind.CONNECT:
                backoff = min(max(2 * backoff, CONNECT_BACKOFF_S[0]), CONNECT_BACKOFF_S[1])
                await asyncio.sleep(backoff)
            else:
                backoff = 0.0
            if conversation is not None and conversation.turn > 1 and self.factory.think_time_s > 0:
                await asyncio.sleep(float(think.exponential(self.factory.think_time_s)))

    async def _open(self) -> None:
        load, offsets = self.plan.load, open_loop_offsets(self.plan)
        cap = asyncio.Semaphore(load.max_in_flight) if load.max_in_flight else None
        async with asyncio.TaskGroup() as tg:
            for offset in offsets.tolist():
                t_intended = self.t0 + offset
                await _sleep_until(t_intended, self.clock)
                if self.interrupted:
                    break
                self.recorder.due(t_intended)
                t_slot = None
                if cap is not None:
                    await cap.acquire()
                    t_slot = self.clock()
                    if self.interrupted:
                        cap.release()
                        break
                tg.create_task(self._one(t_intended, t_slot, cap))

    async def _one(
        self,
        t_intended: float,
        t_slot: float | None,
        cap: asyncio.Semaphore | None = None,
        *,
        conversation: Conversation | None = None,
        sampled: bool = True,
    ) -> RequestRecord:
        prepared = self.factory.next(conversation.history if conversation else ())
        answer: list[str] | None = [] if conversation is not None else None
        self.recorder.started(self.clock())
        try:
            record = await send_request(
                self.http,
                self.path,
                prepared.body,
                self.api,
                prepared.inputs,
                t_intended=t_intended,
                t_slot=t_slot,
                clock=self.clock,
                timeout_s=self.plan.timeout_s,
                convention=self.convention,
                max_event_chars=self.plan.max_event_chars,
                request_id_header=self.plan.request_id_header,
                answer=answer,
                on_cut=self.on_record,
                max_tokens=prepared.max_tokens,
            )
        except asyncio.CancelledError:
            self.recorder.abandoned(self.clock())
            raise
        finally:
            if cap is not None:
                cap.release()
        self.factory.observe(prepared, record.prompt_tokens)
        if self._outage.seen(record) >= GONE_AFTER_S:
            self.gone.set()
        record = believable(record, prepared.max_tokens)
        if prepared.model is not None:  # a copy only where the workload splits requests over models
            record = replace(record, model=prepared.model)
        if conversation is not None:
            record = replace(record, turn=conversation.turn)
            conversation.advance(prepared.messages, "".join(answer or ()), record.ok)
        if record.t_done >= self.t_stop:
            self.stopping()  # the request floor decides whether the window still takes it
        self.recorder.add(record, sampled=sampled, asked_tokens=prepared.max_tokens)
        if self.on_record is not None:
            self.on_record(record)
        return record

    async def _cpu_window(self) -> None:
        """This process's CPU time over the measured window (what the generator itself cost), and how
        long its loop thread was runnable but waiting for a core (another process had it)."""
        await _sleep_until(self.recorder.window_start, self.clock)
        self._cpu_start = time.process_time()
        self._wait_start = _runqueue_wait_s()
        if math.isfinite(self.t_stop):
            while self.clock() < self.t_stop:  # the request floor may move the end
                await _sleep_until(self.t_stop, self.clock)
            self._cpu_end = time.process_time()
            self._wait_end = _runqueue_wait_s()

    async def _loop_probe(self) -> None:
        """How late this event loop runs a timer, over the window: the client's own scheduling delay.

        Whatever keeps the loop from running on time shows here: its own
        callbacks piling up, or the OS giving its core to another process
        (a noisy neighbour, CPU steal), which the process's own CPU time
        cannot show. Recorded and said in the caveats, not a verdict by itself:
        bursts of chunks from one engine step make it read high on a quiet
        machine too (the run-queue wait is what tells a neighbour apart).
        """
        await _sleep_until(self.recorder.window_start, self.clock)
        loop = asyncio.get_running_loop()
        over = loop.create_future()

        def tick(t: float) -> None:  # a timer callback, not a task's sleep: a wake-up cost ~5x more that way
            now = self.clock()
            self._loop_lag_held.append(max(0.0, now - t - LOOP_PROBE_INTERVAL_S))
            if len(self._loop_lag_held) >= LOOP_PROBE_HELD:
                self._record_loop_lag()
            if now < self.t_stop:
                timer[0] = loop.call_later(LOOP_PROBE_INTERVAL_S, tick, now)
            elif not over.done():
                over.set_result(None)

        timer = [loop.call_later(LOOP_PROBE_INTERVAL_S, tick, self.clock())]
        try:
            await over
        finally:
            timer[0].cancel()

    def _record_loop_lag(self) -> None:
        self._loop_lag.record_many_s(np.array(self._loop_lag_held, dtype=np.float64))
        self._loop_lag_held.clear()

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            now = self.clock()
            planned = self.t_stop - self.t0 if math.isfinite(self.t_stop) else None  # as a floor lengthens it
            window = max(0.0, min(now, self.recorder.window_end) - self.recorder.window_start)
            snapshot = LoadSnapshot(self.plan.load, now - self.t0, self.recorder.snapshot(), planned, window)
            self.observer.on_progress(snapshot)


def _runqueue_wait_s() -> float | None:
    """Seconds this thread has spent runnable but not running (Linux ``/proc/self/schedstat``)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class Outage:
    """Stretches in which the server refused every connection: their sum so far (a server down 0.6 s of every
    2 s is down 30% of the level, though no stretch is long), and how long the one in progress has lasted. A
    request that connected (an HTTP error too) ends one where it was sent: the server was there."""

    __slots__ = ("_from", "_total")

    def __init__(self) -> None:
        self._from: float | None = None  # the first refused connection since the last answer
        self._total: float | None = None

    def seen(self, record: RequestRecord) -> float:
        """Take a finished request; how long the outage in progress has lasted (0: none)."""
        if record.error is not ErrorKind.CONNECT:
            if self._from is not None:  # a connection taken after the first refusal ended it then; one held
                self._close(max(record.t_sent, self._from))  # through it was being answered: no outage
            return 0.0
        if self._from is None:
            self._from = record.t_done
        return record.t_done - self._from

    def lasting(self, now: float) -> float:
        """How long the outage in progress has lasted at ``now`` (0: none)."""
        return 0.0 if self._from is None else now - self._from

    def total(self, end: float) -> float | None:
        """Every outage added up, one still in progress at ``end`` included (None: none)."""
        if self._from is not None:
            self._close(end)
        return self._total

    def _close(self, at: float) -> None:
        assert self._from is not None
        self._total = (self._total or 0.0) + at - self._from
        self._from = None


async def _first(*events: asyncio.Event) -> None:
    """Until any of ``events`` is set."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def _sleep_until(t: float, clock: Clock) -> None:
    """Return at ``t`` or after, never before: a timer may fire up to a millisecond early (libuv's, under
    uvloop, counts whole milliseconds), and an open-loop send before its due time read as a negative lag
    that the lag histogram could not hold (51 of 535 sends at 150/s were dropped, biasing it upward)."""
    while (delay := t - clock()) > 0:
        await asyncio.sleep(delay)
