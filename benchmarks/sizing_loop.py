"""The sizing simulation's event loop, compiled and in Python: simulated requests per CPU second.

Each row serves one replica at 80% of its capacity (Poisson arrivals) under one law; both loops
give the same timelines bit for bit (``tests/planner/test_replica_sim_compiled.py``). No network.

    python benchmarks/sizing_loop.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.engine import EngineConfig  # noqa: E402
from planner.capacity.sizing import capacity_rps  # noqa: E402
from planner.laws.stepmodel import prompt_pairs  # noqa: E402
from planner.simulation import replica_sim  # noqa: E402

REQUESTS = 100_000
LAWS = {
    "chapter (25 + 0.4b, cap 87)": (EngineConfig(base_ms=25, per_seq_ms=0.4, max_num_seqs=87), 200, 0.0),
    "KV and prefill, cap 32": (
        EngineConfig(base_ms=15, per_seq_ms=0.3, max_num_seqs=32, per_kv_ms=1.0, prefill_ms_per_token=0.02),
        128,
        1024.0,
    ),
}


def per_cpu_second(loop: Callable[..., object], args: tuple[object, ...]) -> float:
    t0 = time.process_time()
    loop(*args)
    return REQUESTS / (time.process_time() - t0)


def main() -> None:
    print(f"compiled loop built: {replica_sim.COMPILED}")
    print("| law | compiled req/CPU-s | Python req/CPU-s | ratio |\n|---|---|---|---|")
    for name, (law, output, prompt) in LAWS.items():
        rng = np.random.default_rng(0)
        rate = 0.8 * capacity_rps(law, output, prompt)
        arrivals = np.cumsum(rng.exponential(1000.0 / rate, REQUESTS))
        outs, prompts = np.full(REQUESTS, output, dtype=np.int64), np.full(REQUESTS, prompt)
        prefill = law.prefill_ms_per_token * prompts + law.prefill_attention_ms * prompt_pairs(prompts) / 1e6
        args = (arrivals, outs, prompts, prefill, law.base_ms, law.per_seq_ms, law.max_num_seqs, law.per_kv_ms / 1000)
        compiled = per_cpu_second(replica_sim.serve, args) if replica_sim.COMPILED else float("nan")
        python = per_cpu_second(replica_sim.serve_reference, args)
        print(f"| {name} | {compiled:,.0f} | {python:,.0f} | {compiled / python:.0f}x |")


if __name__ == "__main__":
    main()
