"""A worker process that dies mid-level is reported; the other workers' data is kept."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal

import pytest

from loadgen.client import HttpOptions
from loadgen.results import Load
from loadgen.runner import LevelPlan
from loadgen.sim.server import SimProcess
from loadgen.workers import run_level_in_processes
from loadgen.workload import Lengths, Workload


@pytest.mark.asyncio
async def test_one_dead_worker_leaves_the_others_data() -> None:
    with SimProcess() as sim:
        workload = Workload(api="completions", model="sim-model", prompt_tokens=Lengths(8), output_tokens=Lengths(8))
        task = asyncio.create_task(
            run_level_in_processes(
                LevelPlan(Load("concurrency", 4), duration_s=3.0),
                workload,
                base_url=sim.base_url + "/",
                headers={},
                http=HttpOptions(timeout_s=10),
                workers=2,
                scrape=False,
                stop=asyncio.Event(),
            )
        )
        victims: list[int] = []
        deadline = asyncio.get_running_loop().time() + 60
        while len(victims) < 2 and asyncio.get_running_loop().time() < deadline:  # both workers exist
            await asyncio.sleep(0.1)
            victims = [p.pid for p in mp.active_children() if p.pid is not None]
        await asyncio.sleep(1.0)  # starting or running: either way its loss must be reported, not waited for
        os.kill(victims[0], signal.SIGKILL)
        outcome = await asyncio.wait_for(task, timeout=60)
    assert len(outcome.lost_workers) == 1 and "died" in outcome.lost_workers[0], outcome.lost_workers
    assert not outcome.result.complete
    assert outcome.result.completed > 0 and outcome.result.workers == 1
