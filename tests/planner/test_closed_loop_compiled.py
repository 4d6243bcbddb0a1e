"""The compiled closed loop measures what the Python loop stepping the engine measures, bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.choices import Mode
from loadgen.engine import EngineConfig
from planner.simulation.closed_loop import compilable, engine_terms, serve_reference

closed_loop_compiled = pytest.importorskip(
    "planner.simulation.closed_loop_compiled",
    reason="COMPILED CLOSED LOOP NOT BUILT: pip install -e . with a C compiler builds it",
)


@st.composite
def levels(draw: st.DrawFn) -> tuple[EngineConfig, np.ndarray, np.ndarray, np.ndarray, int]:
    clients = draw(st.integers(1, 48))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    law = EngineConfig(
        base_ms=draw(st.floats(0.0, 50)),
        per_seq_ms=draw(st.floats(0.01, 3)),
        max_num_seqs=draw(st.integers(1, 64)),
        per_kv_ms=draw(st.sampled_from([0.0, 0.013, 0.8, 2.5])),
        prefill_ms_per_token=draw(st.sampled_from([0.0, 0.02, 0.37])),
        prefill_attention_ms=draw(st.sampled_from([0.0, 20.0])),
    )
    budget = draw(st.sampled_from([None, 0, 37, 512]))  # 0: the batch cap itself, the tightest budget
    law = dataclasses.replace(
        law,
        max_num_batched_tokens=None if budget is None else max(budget, law.max_num_seqs),
        kv_capacity_tokens=draw(st.sampled_from([None, 3000, 40_000])),
    )
    total = clients * draw(st.integers(1, 6))
    prompts = rng.integers(0, draw(st.sampled_from([2, 400, 4000])), total).astype(np.int64)
    outputs = rng.integers(1, draw(st.integers(2, 200)), total).astype(np.int64)
    spread = draw(st.floats(0, 500))
    starts = np.sort(rng.uniform(0, spread, clients)) if draw(st.booleans()) else np.zeros(clients)
    return law, starts, prompts, outputs, draw(st.integers(0, total))


@settings(max_examples=60, deadline=None)
@given(levels())
def test_the_compiled_loop_measures_what_the_engine_does_bit_for_bit(
    level: tuple[EngineConfig, np.ndarray, np.ndarray, np.ndarray, int],
) -> None:
    law, starts, prompts, outputs, warmup = level
    assert compilable(law)
    compiled = closed_loop_compiled.serve(starts, prompts, outputs, warmup, *engine_terms(law))
    reference = serve_reference(law, starts, prompts, outputs, warmup)
    for mine, theirs in zip(compiled, reference, strict=True):
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs)


def test_an_engine_the_compiled_loop_does_not_model_runs_the_reference() -> None:
    assert compilable(EngineConfig())
    for odd in (
        EngineConfig(noise_cv=0.1),
        EngineConfig(spec_draft_tokens=2, spec_acceptance=0.5),
        EngineConfig(per_adapter_ms=1.0),
        EngineConfig(mode=Mode.STATIC),
    ):
        assert not compilable(odd)
