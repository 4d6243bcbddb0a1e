"""A level split among workers: who sends what, one worker's share, and the shares merged into one level.

Shared by the two executors that split a level (worker processes, ``loadgen.run.workers``; Ray actors,
``loadgen.run.ray_workers``), so a share is cut, run and merged the same way wherever it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace

from loadgen.errors import LoadgenError
from loadgen.level.result import LevelResult
from loadgen.load import LevelPlan, split_plan
from loadgen.run.merge import merge_levels
from loadgen.run.observe import LevelObserver
from loadgen.run.requests import Workload
from loadgen.run.runner import run_level
from loadgen.run.scrape import MetricsScraper, metrics_url
from loadgen.wire.client import HttpOptions, make_http_client


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerJob:
    """What one child needs (picklable)."""

    index: int
    plan: LevelPlan
    workload: Workload
    base_url: str
    headers: Mapping[str, str]
    http: HttpOptions
    scrape: bool


@dataclass(frozen=True, slots=True, kw_only=True)
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
            WorkerJob(
                index=i,
                plan=part,
                workload=workload,
                base_url=self.base_url,
                headers=self.headers,
                http=self.http,
                scrape=self.scrape and i == 0,
            )
            for i, part in enumerate(split_plan(plan, self.workers))
        ]


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
