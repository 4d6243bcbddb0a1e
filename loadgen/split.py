"""A level split among workers: who sends what, one worker's share, and the shares merged into one level.

Shared by the two executors that split a level (worker processes, ``loadgen.workers``; Ray actors,
``loadgen.ray_workers``), so a share is cut, run and merged the same way wherever it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace

from loadgen.client import HttpOptions, make_http_client
from loadgen.errors import LoadgenError
from loadgen.observe import LevelObserver
from loadgen.results import LevelResult, merge_levels
from loadgen.runner import LevelPlan, open_loop_offsets, run_level
from loadgen.scrape import MetricsScraper, metrics_url
from loadgen.workload import Workload


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
