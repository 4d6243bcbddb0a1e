"""``planner.capacity.validation``: a measured run served again by the plan's engine, request for request."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.engine import EngineConfig
from planner import parse_slo
from planner.capacity.sizing import Traffic, simulate_replicas
from planner.capacity.validation import MIN_REQUESTS, Correction, most_conservative, replay_check, scaled
from planner.simulation.replica_sim import simulate

LAW = EngineConfig(base_ms=20, per_seq_ms=0.5, max_num_seqs=16, prefill_ms_per_token=0.02)


def _served(n: int, law: EngineConfig) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(4)
    sent_s = 100.0 + np.cumsum(rng.exponential(0.1, n))  # a run's clock need not start at 0
    prompts, outputs = rng.integers(10, 500, n).astype(np.float64), rng.integers(1, 80, n)
    served = simulate(law, (sent_s - sent_s[0]) * 1000, outputs, prompts)
    shuffle = rng.permutation(n)  # records are written as requests finish, not as they were sent
    columns = (sent_s, prompts, outputs, served.ttft_ms, served.last_ms - served.arrival_ms)
    return tuple(c[shuffle] for c in columns)


def test_a_run_the_law_itself_served_replays_exactly_and_a_slower_server_is_named_optimistic() -> None:
    sent, prompts, outputs, ttft, e2e = _served(400, LAW)
    same = replay_check(LAW, "r=10/s", sent, prompts, outputs, ttft, e2e)
    assert same.verdict == "agrees" and all(row.ratio == 1.0 for row in same.rows)
    assert same.rate_rps == 399 / (sent.max() - sent.min())
    slower = _served(400, EngineConfig(base_ms=30, per_seq_ms=0.5, max_num_seqs=16, prefill_ms_per_token=0.02))
    check = replay_check(LAW, "r=10/s", *slower)
    assert check.verdict == "optimistic" and "not the conservative side" in check.note


def test_a_handful_of_requests_is_not_judged() -> None:
    check = replay_check(LAW, "r=10/s", *_served(MIN_REQUESTS - 1, LAW))
    assert check.verdict == "too few requests" and not check.rows


def test_the_correction_recovers_a_uniformly_slower_server_and_the_ttft_it_adds() -> None:
    """A server whose every step term is 1.3x the plan's engine, adding 15 ms to each TTFT besides: the factor and the
    offset come back, and the corrected replay reads what the clients measured."""
    sent, prompts, outputs, ttft, e2e = _served(400, scaled(LAW, 1.3))
    check = replay_check(LAW, "r=10/s", sent, prompts, outputs, ttft + 15.0, e2e + 15.0)
    assert check.verdict == "optimistic" and check.correction is not None
    assert check.correction.step_factor == pytest.approx(1.3, rel=0.005)
    # a step 1e-4 longer shifts every boundary against the arrivals: the mean wait moves by about a millisecond
    assert check.correction.ttft_offset_ms == pytest.approx(15.0, abs=2.0)
    assert check.correction.requests == 400
    for row, corrected in zip(check.rows, check.corrected, strict=True):
        assert corrected.simulated_ms == pytest.approx(row.measured_ms, rel=0.02), row.statistic
    faster = replay_check(LAW, "r=10/s", *_served(400, scaled(LAW, 0.8)))
    assert faster.correction is not None and faster.correction.step_factor == pytest.approx(0.8, rel=0.005)


def test_several_levels_are_corrected_by_the_slowest_steps_and_the_largest_offset_any_showed() -> None:
    one, two = (
        Correction(step_factor=1.1, ttft_offset_ms=20.0, requests=100, rate_rps=4.0),
        Correction(step_factor=1.3, ttft_offset_ms=5.0, requests=200, rate_rps=6.0),
    )
    assert most_conservative([one, None, two]) == Correction(
        step_factor=1.3, ttft_offset_ms=20.0, requests=300, rate_rps=6.0
    )
    tail = Correction(
        step_factor=1.0, ttft_offset_ms=10.0, requests=50, rate_rps=2.0, slo_offsets_ms=(("ttft_p95_ms", 80.0),)
    )
    assert most_conservative([one, tail]) == Correction(
        step_factor=1.1, ttft_offset_ms=20.0, requests=150, rate_rps=4.0, slo_offsets_ms=(("ttft_p95_ms", 80.0),)
    )
    assert most_conservative([two, tail]).slo_offsets_ms == (("ttft_p95_ms", 80.0),)  # type: ignore[union-attr]
    assert most_conservative([None]) is None


def test_a_tail_the_engine_does_not_hold_is_added_where_an_slo_reads_it() -> None:
    """One request in ten stalled 300 ms before its first token (a core shared with the API process, say): the mean
    offset is ~30 ms, but a TTFT p95 SLO is sized with the p95 apart, and the sizing simulation adds it there."""
    sent, prompts, outputs, ttft, e2e = _served(400, LAW)
    stalled = np.where(np.arange(400) % 10 == 0, 300.0, 0.0)
    p95, p50 = parse_slo("ttft_p95<1s"), parse_slo("e2e_p50<5s")
    check = replay_check(LAW, "r=10/s", sent, prompts, outputs, ttft + stalled, e2e + stalled, slos=[p95, p50])
    assert check.correction is not None
    assert check.correction.ttft_offset_ms == pytest.approx(30.0, abs=2.0)
    assert check.correction.added_ms(p95) > 3 * check.correction.ttft_offset_ms  # the p95s apart, not the means
    assert check.correction.added_ms(p50) == check.correction.ttft_offset_ms  # never below the mean offset
    assert check.correction.added_ms(parse_slo("ttft_p99<1s")) == check.correction.ttft_offset_ms  # not asked
    assert "ttft_p95 +" in check.correction.text
    slo = (p95,)
    plain = simulate_replicas(LAW, 1, 5.0, slo, Traffic(output_tokens=40, prompt_tokens=200))
    added = simulate_replicas(
        LAW, 1, 5.0, slo, Traffic(output_tokens=40, prompt_tokens=200, added_ms=check.correction.added_ms)
    )
    assert added.estimates[0].value_ms == pytest.approx(plain.estimates[0].value_ms + check.correction.added_ms(p95))


def test_an_engine_that_queues_more_than_the_server_is_not_corrected_below_what_the_clients_measured() -> None:
    """The plan's engine prefills 4x slower than the server at ~70% of its capacity: the replay queues far
    more. Its surplus sits in the tail's queue, so a mean offset subtracted from every TTFT would read the
    median a third low; it is kept instead (said), and no corrected statistic falls below the measured."""
    heavy = EngineConfig(base_ms=20, per_seq_ms=0.5, max_num_seqs=16, prefill_ms_per_token=0.08)
    check = replay_check(heavy, "r=10/s", *_served(400, LAW))
    assert check.verdict == "pessimistic" and check.correction is not None
    assert check.correction.ttft_offset_ms == 0.0 and check.correction.surplus_ms > 20.0
    assert "above the endpoint's: kept" in check.correction.text
    for row, corrected in zip(check.rows, check.corrected, strict=True):
        assert corrected.simulated_ms >= 0.99 * row.measured_ms, row.statistic
