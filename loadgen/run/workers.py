"""Splits one level across worker processes, each with its own event loop and connection pool.

Each child runs ``run_level`` on its share of the load (a slice of the
concurrency, the rate or the request budget) and sends back its
``LevelResult`` as JSON; the parent merges them exactly (histograms by
``add``, counters by sum). All children start on the same ``t0``: the
runner's monotonic clock is system-wide on Linux, so one
window covers every worker. Only worker 0 scrapes the server's metrics.

Children ignore the group's stop signals; the parent relays an interrupt
through each child's pipe, so Ctrl-C still yields every worker's partial data.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_any
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.histogram import DEFAULT_CONFIG
from loadgen.level.result import LevelResult
from loadgen.load import LevelPlan
from loadgen.run.level_executors import LevelRun, level_notes
from loadgen.run.observe import LevelObserver
from loadgen.run.placement import Placement, place
from loadgen.run.requests import Workload
from loadgen.run.split import SplitOutcome, SplitTarget, WorkerJob, merge_shares, run_share
from loadgen.wire.loops import loop_factory

START_TIMEOUT_S = 60.0
START_MARGIN_S = 0.05


#: What a terminal, ``kill -- -PGID``, a CI job timeout or a closed SSH session sends to the whole
#: process group. Workers ignore them: the parent catches them and stops every worker through its
#: pipe, so their partial results are still merged instead of dying with the signal.
GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Parent and worker talk over one pipe each, never over semaphore-backed queues or events: those are
# registered with multiprocessing's resource tracker, and a tracker killed mid-run (SIGKILL, a group
# signal it does not ignore) is relaunched empty and prints a KeyError traceback per semaphore.
# Worker -> parent: ("ready",), then ("result", payload_json, None) or ("result", None, error).
# Parent -> worker: ("go", t0), then possibly ("stop",).


def _child(job: WorkerJob, conn: Connection) -> None:
    for sig in GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    try:
        conn.send(("ready",))
        message = conn.recv()
        if message[0] != "go":  # stopped before the level began
            return
        with asyncio.Runner(loop_factory=loop_factory(job.http.event_loop)) as loop:
            part = loop.run(_child_level(job, float(message[1]), conn))
        conn.send(("result", part.to_json(), None))
    except LoadgenError as exc:
        conn.send(("result", None, str(exc)))
    except (EOFError, BrokenPipeError):  # the parent is gone: nobody to report to
        pass


async def _child_level(job: WorkerJob, t0: float, conn: Connection) -> LevelResult:
    stop = asyncio.Event()
    parent = os.getppid()

    async def relay() -> None:
        # the parent's stop, or the parent gone (killed outright): either way, wind down
        while not conn.poll() and os.getppid() == parent:
            await asyncio.sleep(0.1)
        stop.set()

    watcher = asyncio.create_task(relay())
    try:
        return await run_share(job, t0, stop)
    finally:
        watcher.cancel()


async def run_level_in_processes(
    plan: LevelPlan, workload: Workload, target: SplitTarget, *, stop: asyncio.Event, placement: Placement
) -> SplitOutcome:
    """Run ``plan`` on ``target.workers`` processes, each where ``placement`` puts it, and merge their results."""
    ctx = mp.get_context("spawn")
    workers: list[_Worker] = []
    try:
        with _tracker_immune_to_hangup():
            for job in target.jobs(plan, workload):
                ours, theirs = ctx.Pipe()
                proc = ctx.Process(target=_child, args=(job, theirs), daemon=True)
                proc.start()
                if proc.pid is not None:  # set by start()
                    placement.pin(job.index, proc.pid)
                theirs.close()  # the child holds its end: our copy would hide its death from recv
                workers.append(_Worker(job.index, proc, ours))
        started, lost = await _await_ready(workers)
        t0 = time.monotonic() + START_MARGIN_S  # the runner's clock, shared by every process
        for worker in started:
            worker.send(("go", t0))
        parts, lost_running = await _collect(started, stop)
        lost += lost_running
    finally:
        for worker in workers:
            worker.close()
    return merge_shares(plan, [LevelResult.from_json(p, DEFAULT_CONFIG) for p in parts], lost)


@dataclass(slots=True)
class InWorkerProcesses:
    """The executor for ``--workers N``: each level split over N fresh processes (``LevelExecutor``), placed
    once, before the first level (``loadgen.run.placement``)."""

    target: SplitTarget
    placement: Placement | None = None

    async def run(self, plan: LevelPlan, workload: Workload, observer: LevelObserver, stop: asyncio.Event) -> LevelRun:
        if self.placement is None:  # sampled while nothing of ours runs yet
            self.placement = await place(self.target.workers)
        observer.on_level_start(plan.load, plan.planned_s)
        outcome = await run_level_in_processes(plan, workload, self.target, stop=stop, placement=self.placement)
        observer.on_level_end(outcome.result)
        return LevelRun(outcome.result, level_notes(plan, outcome.lost_workers))

    def settings(self) -> dict[str, Any]:
        return {} if self.placement is None else {"worker_placement": self.placement.said}


@dataclass(slots=True)
class _Worker:
    """One worker process and the parent's end of its pipe."""

    index: int
    proc: Any
    conn: Connection

    def send(self, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # a worker that died is reported by the reader, not here
            self.conn.send(message)

    def died(self) -> str | None:
        if self.proc.is_alive():
            return None
        return f"exit code {self.proc.exitcode}"

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(timeout=5)
        self.conn.close()


@contextlib.contextmanager
def _tracker_immune_to_hangup() -> Iterator[None]:
    """Start processes with SIGHUP ignored, so the resource tracker that ``spawn`` launches inherits it.

    The tracker ignores SIGINT and SIGTERM itself but not SIGHUP: a closed
    terminal would kill it, and its relaunch warns. An ignored disposition
    survives its exec; a handler would not.
    """
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


async def _await_ready(workers: list[_Worker]) -> tuple[list[_Worker], list[str]]:
    """The workers that started; one that dies while starting is reported, not waited for."""
    waiting = list(workers)
    started: list[_Worker] = []
    lost: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    while waiting:
        for worker in await _readable(waiting):
            waiting.remove(worker)
            try:
                worker.conn.recv()
                started.append(worker)
            except (EOFError, OSError):
                lost.append(f"worker {worker.index} died while starting ({worker.died() or 'its pipe closed'})")
        if waiting and time.monotonic() > deadline:
            indices = sorted(worker.index for worker in waiting)
            raise LoadgenError(f"worker processes {indices} did not start within {START_TIMEOUT_S:g} s")
    return sorted(started, key=lambda worker: worker.index), lost


async def _collect(workers: list[_Worker], stop: asyncio.Event) -> tuple[list[dict[str, Any]], list[str]]:
    """Each worker's result; a stop is relayed to every worker once; a worker that dies is reported."""
    parts: list[dict[str, Any]] = []
    lost: list[str] = []
    pending = list(workers)
    relayed = False
    while pending:
        if stop.is_set() and not relayed:
            relayed = True
            for worker in pending:
                worker.send(("stop",))
        for worker in await _readable(pending):
            pending.remove(worker)
            try:
                _, payload, error = worker.conn.recv()
            except (EOFError, OSError):
                worker.proc.join(timeout=5)
                lost.append(f"worker {worker.index} died ({worker.died() or 'its pipe closed'})")
                continue
            if payload is not None:
                parts.append(payload)
            else:
                lost.append(f"worker {worker.index}: {error}")
    return parts, lost


async def _readable(workers: list[_Worker]) -> list[_Worker]:
    """The workers with something to read (a message, or end of file), waiting at most 0.2 s."""
    ready = await asyncio.to_thread(wait_for_any, [worker.conn for worker in workers], 0.2)
    return [worker for worker in workers if worker.conn in ready]
