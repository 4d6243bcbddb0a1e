"""Splits one level across worker processes, each with its own event loop and connection pool.

Each child runs ``run_level`` on its share of the load (a slice of the
concurrency, the rate or the request budget) and sends back its
``LevelResult`` as JSON; the parent merges them exactly (histograms by
``add``, counters by sum). All children start on the same ``t0``: the
runner's monotonic clock is system-wide on Linux, so one
window covers every worker. Only worker 0 scrapes the server's metrics.

Children ignore SIGINT; the parent relays an interrupt through an event, so
Ctrl-C still yields every worker's partial data.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from multiprocessing import resource_tracker
from multiprocessing.synchronize import Event as MpEvent
from typing import Any

from loadgen.client import HttpOptions, make_http_client
from loadgen.errors import LoadgenError
from loadgen.histogram import DEFAULT_CONFIG
from loadgen.loops import loop_factory
from loadgen.observe import LevelObserver
from loadgen.results import LevelResult, merge_levels
from loadgen.runner import LevelPlan, open_loop_offsets, run_level
from loadgen.scrape import MetricsScraper, metrics_url
from loadgen.workload import Workload

START_TIMEOUT_S = 60.0
START_MARGIN_S = 0.05


@dataclass(frozen=True, slots=True)
class WorkerJob:
    """What one child needs (picklable)."""

    index: int
    plan: LevelPlan
    workload: Workload
    base_url: str
    headers: Mapping[str, str]
    http: HttpOptions
    scrape: bool


@dataclass(frozen=True, slots=True)
class SplitTarget:
    """Where a split level's workers send, and how many share the level (processes or Ray actors)."""

    base_url: str
    headers: Mapping[str, str]
    http: HttpOptions
    workers: int
    scrape: bool  # worker 0 scrapes the server's metrics

    def jobs(self, plan: LevelPlan, workload: Workload) -> list[WorkerJob]:
        """One job per non-empty share of ``plan``."""
        return [
            WorkerJob(i, part, workload, self.base_url, self.headers, self.http, self.scrape and i == 0)
            for i, part in enumerate(split_plan(plan, self.workers))
        ]


def split_plan(plan: LevelPlan, n: int) -> list[LevelPlan]:
    """Share a level among ``n`` workers; each gets a distinct seed (its prompts). Empty shares are dropped.

    Closed loop: the clients and the request budget are divided. Open loop:
    the level's one arrival schedule (``open_loop_offsets``, from the level's
    seed) is dealt out in turn, worker ``i`` taking arrivals ``i, i+n, ...``,
    so the union of the shares is exactly the schedule one process would send.
    """
    load = plan.load
    schedule = open_loop_offsets(plan) if load.kind == "rate" else None
    plans = []
    for i in range(n):
        arrivals = None
        if schedule is None:
            part_load = replace(load, value=_share(int(load.value), n, i))
            requests = _share(plan.requests, n, i) if plan.requests is not None else None
            if part_load.value == 0 or requests == 0:
                continue
        else:
            arrivals = tuple(schedule[i::n].tolist())
            if not arrivals:
                continue
            cap = max(1, _share(load.max_in_flight, n, i)) if load.max_in_flight else None
            part_load = replace(load, value=load.value / n, max_in_flight=cap)
            requests = len(arrivals) if plan.requests is not None else None
        # the request floor was applied to the whole level's duration (session): each worker's window
        # must end at the same instant, so none extends its own
        seed = plan.seed * 1009 + i
        plans.append(
            replace(plan, load=part_load, requests=requests, seed=seed, min_requests=None, arrivals_s=arrivals)
        )
    return plans


def _share(total: int, n: int, i: int) -> int:
    return total // n + (1 if i < total % n else 0)


#: What a terminal, ``kill -- -PGID``, a CI job timeout or a closed SSH session sends to the whole
#: process group. Workers ignore them: the parent catches them and stops every worker through
#: ``stop_flag``, so their partial results are still merged instead of dying with the signal.
GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _child(job: WorkerJob, ready: Any, go: MpEvent, stop: MpEvent, t0_box: Any, results: Any) -> None:
    for sig in GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    try:
        ready.put(job.index)
        go.wait()
        with asyncio.Runner(loop_factory=loop_factory(job.http.event_loop)) as loop:
            part = loop.run(_child_level(job, float(t0_box.value), stop))
        results.put((job.index, part.to_json(), None))
    except LoadgenError as exc:
        results.put((job.index, None, str(exc)))


async def _child_level(job: WorkerJob, t0: float, stop_flag: MpEvent) -> LevelResult:
    stop = asyncio.Event()
    parent = os.getppid()

    async def relay() -> None:
        # the parent's stop, or the parent gone (killed outright): either way, wind down
        while not stop_flag.is_set() and os.getppid() == parent:
            await asyncio.sleep(0.1)
        stop.set()

    watcher = asyncio.create_task(relay())
    try:
        return await run_share(job, t0, stop)
    finally:
        watcher.cancel()


async def run_share(
    job: WorkerJob, t0: float, stop: asyncio.Event, observer: LevelObserver | None = None
) -> LevelResult:
    """One worker's share of a level, on its own connection pool, starting at ``t0`` on its monotonic clock.

    The one per-worker code path: a local process and a Ray actor both run it.
    """
    async with make_http_client(job.base_url, job.headers, job.http) as http:
        scraper = MetricsScraper(http, metrics_url(job.base_url)) if job.scrape else None
        return await run_level(job.plan, job.workload, http, observer=observer, stop=stop, scraper=scraper, t0=t0)


@dataclass(frozen=True, slots=True)
class SplitOutcome:
    result: LevelResult
    lost_workers: tuple[str, ...]  # one line per worker that produced no result
    parts: tuple[LevelResult, ...] = ()  # each surviving worker's own share, as it measured it


def merge_shares(plan: LevelPlan, parts: list[LevelResult], lost: list[str]) -> SplitOutcome:
    """The level as one result: shares merged exactly, labelled with the whole level's load.

    A lost worker leaves the others' data, marked incomplete.
    """
    if not parts:
        raise LoadgenError("every worker failed: " + "; ".join(lost))
    merged = replace(merge_levels(parts), load=plan.load)
    if lost:
        merged = replace(merged, complete=False)
    return SplitOutcome(merged, tuple(lost), tuple(parts))


async def run_level_in_processes(
    plan: LevelPlan, workload: Workload, target: SplitTarget, *, stop: asyncio.Event
) -> SplitOutcome:
    """Run ``plan`` on ``target.workers`` processes and merge their results."""
    _start_resource_tracker()
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go, stop_flag = ctx.Event(), ctx.Event()
    t0_box = ctx.Value("d", 0.0)
    procs = []
    for job in target.jobs(plan, workload):
        proc = ctx.Process(target=_child, args=(job, ready, go, stop_flag, t0_box, results), daemon=True)
        proc.start()
        procs.append(proc)
    try:
        started, lost = await _await_ready(procs, ready)
        t0_box.value = time.monotonic() + START_MARGIN_S  # the runner's clock, shared by every process
        go.set()
        parts, lost_running = await _collect(procs, started, results, stop, stop_flag)
        lost += lost_running
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=5)
    return merge_shares(plan, [LevelResult.from_json(p, DEFAULT_CONFIG) for p in parts], lost)


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker with SIGHUP ignored.

    The tracker (which the queues and events below need) ignores SIGINT and
    SIGTERM but not SIGHUP: a closed terminal killed it, and its relaunch
    printed a stdlib ``KeyError`` traceback. An ignored disposition survives
    its exec; a handler would not.
    """
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, previous)


async def _await_ready(procs: list[Any], ready: Any) -> tuple[set[int], list[str]]:
    """The workers that started; one that dies while starting is reported, not waited for."""
    waiting, started, lost = set(range(len(procs))), set(), []
    deadline = time.monotonic() + START_TIMEOUT_S
    while waiting:
        try:
            index = await asyncio.to_thread(ready.get, True, 0.2)
            waiting.discard(index)
            started.add(index)
        except queue.Empty:
            for i in sorted(waiting):
                if not procs[i].is_alive():
                    waiting.discard(i)
                    lost.append(f"worker {i} died while starting (exit code {procs[i].exitcode})")
            if waiting and time.monotonic() > deadline:
                raise LoadgenError(
                    f"worker processes {sorted(waiting)} did not start within {START_TIMEOUT_S:g} s"
                ) from None
    return started, lost


async def _collect(
    procs: list[Any], started: set[int], results: Any, stop: asyncio.Event, stop_flag: MpEvent
) -> tuple[list[dict[str, Any]], list[str]]:
    parts: list[dict[str, Any]] = []
    lost: list[str] = []
    pending = set(started)
    while pending:
        if stop.is_set():
            stop_flag.set()
        try:
            index, payload, error = await asyncio.to_thread(results.get, True, 0.2)
        except queue.Empty:
            for i in list(pending):
                if not procs[i].is_alive() and procs[i].exitcode not in (None, 0):
                    pending.discard(i)
                    lost.append(f"worker {i} died (exit code {procs[i].exitcode})")
            continue
        pending.discard(index)
        if payload is not None:
            parts.append(payload)
        else:
            lost.append(f"worker {index}: {error}")
    return parts, lost
