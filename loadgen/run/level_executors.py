"""Where a level's requests are sent from: one seam, picked once per session.

A level runs in this process (``InProcess``), split over worker processes
(``loadgen.run.workers.InWorkerProcesses``) or over Ray actors
(``loadgen.run.ray_workers.OnRayActors``). Each returns the level and the lines
it has for the user (a lost worker, a skewed clock), and says what it adds to
the results' settings. The session knows none of their details, so another
place to run from (a remote agent, Kubernetes jobs) is one new class that
satisfies ``LevelExecutor``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from loadgen.level.result import LevelResult
from loadgen.load import LevelPlan
from loadgen.run.observe import LevelObserver
from loadgen.run.requests import Workload
from loadgen.run.runner import run_level
from loadgen.run.scrape import MetricsScraper
from loadgen.wire.records import Clock, RequestRecord


@dataclass(frozen=True, slots=True)
class LevelRun:
    """A level as its executor ran it, with its notes (each starting with the level's label)."""

    result: LevelResult
    notes: tuple[str, ...] = ()


def level_notes(plan: LevelPlan, lines: Iterable[str]) -> tuple[str, ...]:
    """Notes about one level, each naming it, as the results file lists them."""
    return tuple(f"{plan.load.label}: {line}" for line in lines)


class LevelExecutor(Protocol):
    async def run(
        self, plan: LevelPlan, workload: Workload, observer: LevelObserver, stop: asyncio.Event
    ) -> LevelRun: ...

    def settings(self) -> dict[str, Any]:
        """What the results' settings gain from where the levels ran (Ray: its options and worker clocks)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class InProcess:
    """The level on this process's event loop and connection pool: the only executor that keeps every
    request's record (``on_record``) and that runs in virtual time."""

    http: httpx.AsyncClient
    metrics_url: str | None  # scrape the server's gauges there during the window, or not at all
    clock: Clock
    real_time: bool
    on_record: Callable[[RequestRecord], None] | None = None

    async def run(self, plan: LevelPlan, workload: Workload, observer: LevelObserver, stop: asyncio.Event) -> LevelRun:
        scraper = MetricsScraper(self.http, self.metrics_url) if self.metrics_url else None
        result = await run_level(plan, workload, self.http, clock=self.clock, observer=observer, stop=stop,
                                 scraper=scraper, on_record=self.on_record, real_time=self.real_time)  # fmt: skip
        return LevelRun(result)

    def settings(self) -> dict[str, Any]:
        return {}
