"""CPU-bound processes on the generator's core: the level is flagged client-bound, and says why.

The generator's own CPU time and send lag cannot see this (it is simply not running); the time its
loop spends runnable but waiting for a core does (``/proc/thread-self/schedstat``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.engine import EngineConfig
from loadgen.results import load
from loadgen.sim.openai_app import SimOptions
from loadgen.sim.server import SimProcess

pytestmark = [
    pytest.mark.skipif(
        not hasattr(os, "sched_setaffinity")
        or (os.cpu_count() or 1) < 2
        or not Path("/proc/thread-self/schedstat").exists(),
        reason="needs Linux scheduler statistics and two cores",
    ),
    pytest.mark.slow,
]


def run_on_core_0(base_url: str, out: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "loadgen", "run", "--url", base_url, "--concurrency", "64", "--max-tokens", "32",
            "--duration", "2", "--warmup", "0.5", "-o", str(out), "--quiet"]  # fmt: skip
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.sched_setaffinity(0, {0})
    )


def test_a_cpu_hog_on_the_generators_core_flags_the_level(tmp_path: Path) -> None:
    # a fast law (8 ms steps at 64) keeps the generator busy, about a tenth of its core: a neighbour then takes
    # a share of the window far above the floor, where the worked example's 50 ms steps left it idle and near it
    with SimProcess(SimOptions(engine=EngineConfig(base_ms=5.0, per_seq_ms=0.05, max_num_seqs=256))) as sim:
        assert sim._proc is not None
        os.sched_setaffinity(sim._proc.pid, {1})  # the target on the other core: only the client is disturbed
        hogs = [  # five CPU-bound neighbours on the generator's core: it gets a sixth of it when it wakes
            subprocess.Popen(
                [sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {0})
            )
            for _ in range(5)
        ]
        try:
            noisy = run_on_core_0(sim.base_url, tmp_path / "noisy.json")
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        quiet = run_on_core_0(sim.base_url, tmp_path / "quiet.json")
    assert noisy.returncode == 0 and quiet.returncode == 0, noisy.stderr + quiet.stderr
    flagged, clean = load(tmp_path / "noisy.json").levels[0], load(tmp_path / "quiet.json").levels[0]
    assert flagged.client_bound and any("taken by another process" in c for c in flagged.client_bound_causes)
    note = " ".join(noisy.stderr.split())  # the note may also name a send lag the taken core caused, before it
    assert re.search(r"client-bound \([^)]*its core taken by another process", note), note
    assert clean.steal_share is not None and clean.steal_share < flagged.steal_share  # type: ignore[operator]
    summary = json.loads(json.dumps(flagged.summary()))
    assert summary["client"]["core_wait_ratio"] > 0.6 and summary["client"]["loop_lag_p99_ms"] is not None
    assert not clean.client_bound
