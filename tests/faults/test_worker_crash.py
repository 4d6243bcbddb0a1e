"""A worker process that dies mid-level is reported; the other workers' data is kept."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from loadgen.api import Api
from loadgen.lengths import Lengths
from loadgen.load import LevelPlan, Load
from loadgen.results import load
from loadgen.run.placement import Placement
from loadgen.run.requests import Workload
from loadgen.run.split import SplitTarget
from loadgen.run.workers import run_level_in_processes
from loadgen.sim.server import SimProcess
from loadgen.wire.client import HttpOptions


@pytest.mark.slow
@pytest.mark.asyncio
async def test_one_dead_worker_leaves_the_others_data() -> None:
    with SimProcess() as sim:
        workload = Workload(api=Api.COMPLETIONS, model="sim-model", prompt_tokens=Lengths(8), output_tokens=Lengths(8))
        task = asyncio.create_task(
            run_level_in_processes(
                LevelPlan(load=Load(kind="concurrency", value=4), duration_s=3.0),
                workload,
                SplitTarget(
                    base_url=sim.base_url + "/", headers={}, http=HttpOptions(timeout_s=10), workers=2, scrape=False
                ),
                stop=asyncio.Event(),
                placement=Placement(None, "not pinned"),
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


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["TERM", "HUP"])
def test_a_signal_to_the_whole_process_group_keeps_every_workers_data(tmp_path: Path, sig: signal.Signals) -> None:
    # A closed SSH session (HUP) or a CI timeout (TERM) signals every process of the group: the
    # workers and multiprocessing's resource tracker too, not only loadgen's own process.
    out = tmp_path / "r.json"
    with SimProcess() as sim:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen", "run", "--url", sim.base_url, "--concurrency", "4", "--workers", "2",
             "--duration", "60", "--max-tokens", "8", "-o", str(out), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while _tokens_served(sim.base_url) < 200:  # both workers are streaming: the level is under way
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert b"Traceback" not in err and b"died" not in err, err
    level = load(out).levels[0]
    assert not level.complete and level.workers == 2 and level.completed > 0


def _tokens_served(base_url: str) -> float:
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if "generation_tokens_total{" in line)


@pytest.mark.slow
def test_a_killed_resource_tracker_prints_no_traceback(tmp_path: Path) -> None:
    # Worker IPC is pipes, so the tracker spawn starts holds nothing of ours: killed outright mid-run, it is
    # not relaunched and no relaunched tracker prints a KeyError per semaphore it never saw.
    out = tmp_path / "r.json"
    with SimProcess() as sim:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen", "run", "--url", sim.base_url, "--concurrency", "4", "--workers", "2",
             "--duration", "60", "--max-tokens", "8", "-o", str(out), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while _tokens_served(sim.base_url) < 200:  # both workers are streaming
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        tracker = _child_running(proc.pid, b"resource_tracker")
        os.kill(tracker, signal.SIGKILL)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert b"Traceback" not in err and b"KeyError" not in err and b"relaunching" not in err, err
    assert load(out).levels[0].completed > 0


def _child_running(parent: int, needle: bytes) -> int:
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if ppid == parent and needle in cmdline:
            return int(entry.name)
    raise AssertionError(f"no child of {parent} runs {needle!r}")
