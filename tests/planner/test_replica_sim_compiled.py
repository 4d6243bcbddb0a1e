"""The compiled sizing loop gives the Python loop's timelines, bit for bit (the Python loop is the reference)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.engine import EngineConfig
from planner.simulation import replica_sim
from planner.simulation.replica_sim import law_terms, serve_reference, simulate

pytestmark = pytest.mark.skipif(
    not replica_sim.COMPILED, reason="COMPILED SIZING LOOP NOT BUILT: pip install -e . with a C compiler builds it"
)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[EngineConfig, np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 300))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    law = EngineConfig(
        base_ms=draw(st.floats(0.5, 50)),
        per_seq_ms=draw(st.floats(0, 3)),
        max_num_seqs=draw(st.integers(1, 64)),
        per_kv_ms=draw(st.sampled_from([0.0, 0.013, 0.8, 2.5])),
        prefill_ms_per_token=draw(st.sampled_from([0.0, 0.02])),
        prefill_attention_ms=draw(st.sampled_from([0.0, 20.0])),
    )
    budget = draw(st.sampled_from([None, 0, 37, 512]))  # 0: the batch cap itself, the tightest budget
    law = dataclasses.replace(
        law,
        max_num_batched_tokens=None if budget is None else max(budget, law.max_num_seqs),
        kv_capacity_tokens=draw(st.sampled_from([None, 3000, 40_000])),
    )
    mean_gap_ms = draw(st.floats(0.5, 500))
    gaps = rng.exponential(mean_gap_ms, n)
    gaps[rng.random(n) < draw(st.floats(0, 0.5))] = 0.0  # bursts: several arrivals at one instant
    prompts = rng.integers(0, 4000, n).astype(np.float64)
    outputs = rng.integers(1, draw(st.integers(2, 300)), n)
    return law, np.cumsum(gaps), outputs, prompts


@given(workloads())
def test_the_compiled_loop_gives_the_reference_timelines_bit_for_bit(
    workload: tuple[EngineConfig, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    law, arrivals, outputs, prompts = workload
    timeline = simulate(law, arrivals, outputs, prompts)  # the compiled loop
    first, last = serve_reference(arrivals, outputs, prompts, *law_terms(law))
    assert np.array_equal(timeline.first_ms, first) and np.array_equal(timeline.last_ms, last)
