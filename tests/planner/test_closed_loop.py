"""The closed loop stepped on the simulator's engine: its timing rules, exactly, in virtual time."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.engine import EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.quantity import Metric
from loadgen.sim.openai_app import SimOptions
from planner import Mix
from planner.laws.lengthsample import LengthSample
from planner.simulation.closed_loop import MIN_MEASURED, run_closed_loop
from tests.virtual import run_virtual


def test_alone_a_request_meets_an_idle_engine_and_its_prefill_is_its_first_step() -> None:
    engine = EngineConfig(base_ms=10.0, per_seq_ms=0.5, prefill_ms_per_token=0.02, max_num_seqs=8)
    level = run_closed_loop(engine, 1, LengthSample.fixed(500, 32))
    assert level.ttft_ms.size == MIN_MEASURED
    np.testing.assert_allclose(level.ttft_ms, 10.0 + 0.5 + 0.02 * 500)  # no wait: the engine wakes for it
    np.testing.assert_allclose(level.tpot_ms, 10.5)


def test_a_client_whose_answer_ended_waits_for_the_step_begun_without_it() -> None:
    # two clients, no prefill cost: the step after an answer ends starts before that client sends again, so
    # its request is admitted one step later: TTFT is two steps of 10 ms, never one
    level = run_closed_loop(EngineConfig(base_ms=10.0, per_seq_ms=0.0, max_num_seqs=8), 2, LengthSample.fixed(0, 16))
    np.testing.assert_allclose(level.ttft_ms, 20.0)
    assert level.ttft_ms_at(95) == pytest.approx(20.0)


def test_staggered_clients_do_not_lock_into_cohorts() -> None:
    # eight clients of 1,024-token prompts: started together they would prefill 8,192 tokens in one step
    # (164 ms at 0.02 ms/token) every cohort; spread over one request's duration they join one at a time
    engine = EngineConfig(base_ms=20.0, per_seq_ms=0.3, per_kv_ms=0.8, prefill_ms_per_token=0.02, max_num_seqs=64)
    level = run_closed_loop(engine, 8, LengthSample.fixed(1024, 128))
    assert level.ttft_ms_at(50) < 2 * (20.0 + 0.3 * 8 + 0.8 * 8 * 1.1 + 0.02 * 1024)
    assert level.ttft_ms.size == 12 * 8 and level.tpot_ms_at(50) is not None


def test_a_closed_loop_needs_clients_and_tokens() -> None:
    with pytest.raises(ValueError, match="clients >= 1"):
        run_closed_loop(EngineConfig(), 0, LengthSample.fixed(10, 10))
    one_token = run_closed_loop(EngineConfig(base_ms=10.0, per_seq_ms=0.0), 1, LengthSample.fixed(0, 1))
    assert one_token.tpot_ms_at(50) is None and one_token.ttft_ms.size == MIN_MEASURED


def test_the_same_levels_over_the_simulators_http_in_virtual_time_read_the_same() -> None:
    """The closed loop stepped here stands for a sweep of the simulator: its statistics must match one."""
    engine = EngineConfig(base_ms=20.0, per_seq_ms=0.3, per_kv_ms=0.8, prefill_ms_per_token=0.02, max_num_seqs=64)
    profile = parse_profile(
        {
            "schema_version": 1,
            "name": "same",
            "target": "sim",
            "api": "completions",
            "workload": {"prompt_tokens": 1024, "output_tokens": 128},
            "load": {"mode": "closed", "levels": [1, 8, 32], "duration_s": 60, "warmup_s": 10},
            "seed": 0,
        },
        "test",
    )
    results, _ = run_virtual(profile, sim=SimOptions(engine=engine, max_model_len=1 << 20))
    for swept in results.levels:
        stepped = run_closed_loop(engine, round(swept.load.value), LengthSample.fixed(1024, 128))
        for q in (50, 95):
            assert stepped.ttft_ms_at(q) == pytest.approx(swept.percentile_ms(Metric.TTFT, q), rel=0.01)
        assert stepped.tpot_ms_at(50) == pytest.approx(swept.percentile_ms(Metric.TPOT, 50), rel=0.01)


def test_answers_of_varied_length_read_as_the_simulators_http_when_the_loop_draws_them_too() -> None:
    """Outputs uniform within 25%: the clients reshuffle every round, so TTFT p95 holds the prefills that
    collide. The loop drawing lengths as the sweep did reads that sweep's tail; on fixed lengths it stays
    as staggered as it started and reads about the p50."""
    engine = EngineConfig(
        base_ms=20.0,
        per_seq_ms=0.3,
        per_kv_ms=0.8,
        prefill_ms_per_token=0.02,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
    )
    output = {"mean": 128, "dist": "uniform", "spread": 0.25}
    profile = parse_profile(
        {
            "schema_version": 1,
            "name": "varied",
            "target": "sim",
            "api": "completions",
            "workload": {"prompt_tokens": 1024, "output_tokens": output},
            "load": {"mode": "closed", "levels": [8, 32], "duration_s": 60, "warmup_s": 10},
            "seed": 0,
        },
        "test",
    )
    results, _ = run_virtual(profile, sim=SimOptions(engine=engine, max_model_len=1 << 20))
    drawn = LengthSample.shaped(Mix(1024, 128), None, output)
    for swept in results.levels:
        c = round(swept.load.value)
        stepped, fixed = (run_closed_loop(engine, c, lengths) for lengths in (drawn, LengthSample.fixed(1024, 128)))
        tail = swept.percentile_ms(Metric.TTFT, 95)
        assert tail is not None
        assert stepped.ttft_ms_at(95) == pytest.approx(tail, rel=0.1), c
        assert fixed.ttft_ms_at(95) < 0.85 * tail, c
        assert stepped.ttft_ms_at(50) == pytest.approx(swept.percentile_ms(Metric.TTFT, 50), rel=0.05), c
        assert stepped.tpot_ms_at(50) == pytest.approx(swept.percentile_ms(Metric.TPOT, 50), rel=0.02), c
