"""Replica sizing: the event-jump replica simulation against the step engine and a closed form,
and the sizing decision it drives (settled intervals, never below the utilisation rule)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.engine import Engine, EngineConfig
from loadgen.load import arrival_offsets
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner import PlanRequest, StepModel, plan_from_law, simulate, simulate_replicas
from planner.capacity.sizing import Traffic, replicas_for, t975
from planner.laws.lengthsample import LengthSample
from planner.simulation.closed_loop import run_closed_loop

LAW = StepModel.given(25.0, 0.4)
TTFT_1S = SloTarget(metric=Metric.TTFT, percentile=95, limit=1000.0)
SLOS = (SloTarget(metric=Metric.TPOT, percentile=95, limit=60.0), TTFT_1S)


def engine_timeline(
    cfg: EngineConfig, arrivals: np.ndarray, outs: np.ndarray, prompts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """First and last token times from the simulated server's own engine, one step at a time."""
    engine = Engine(config=cfg)
    n = len(arrivals)
    first, last = np.full(n, np.nan), np.full(n, np.nan)
    t, i = 0.0, 0
    while True:
        while i < n and arrivals[i] <= t:
            engine.submit(i, prompt_tokens=int(prompts[i]), max_tokens=int(outs[i]), now_ms=float(arrivals[i]))
            i += 1
        step = engine.next_step(t)
        if step is None:
            if i >= n:
                return first, last
            t = float(arrivals[i])
            continue
        t = step.end_ms
        for seq in step.emitted:
            if np.isnan(first[seq]):
                first[seq] = t
            last[seq] = t


@pytest.mark.parametrize(("cap", "per_kv_ms"), [(1, 0.0), (4, 0.0), (16, 0.0), (4, 0.7), (16, 2.5)])
def test_event_jumps_match_the_step_engine_step_for_step(cap: int, per_kv_ms: float) -> None:
    rng = np.random.default_rng(cap)
    n = 600
    arrivals = arrival_offsets(3.0, n, rng=rng) * 1000.0
    outs, prompts = rng.integers(1, 40, n), rng.integers(0, 200, n)
    cfg = EngineConfig(base_ms=25, per_seq_ms=0.4, prefill_ms_per_token=0.05, max_num_seqs=cap, per_kv_ms=per_kv_ms)
    first, last = engine_timeline(cfg, arrivals, outs, prompts)
    timeline = simulate(cfg, arrivals, outs, prompts)
    np.testing.assert_allclose(timeline.first_ms, first, rtol=0, atol=1e-6)
    np.testing.assert_allclose(timeline.last_ms, last, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("cap", "budget", "kv_capacity", "attention"),
    [(4, 4, None, 0.0), (8, 64, None, 0.0), (16, 512, None, 20.0), (16, 512, 3000, 0.0), (8, None, 2000, 20.0)],
)
def test_chunked_prefill_and_the_kv_limit_match_the_step_engine_step_for_step(
    cap: int, budget: int | None, kv_capacity: int | None, attention: float
) -> None:
    """The token budget chunks a long prompt over several steps, decode tokens first; a request waits until its
    prompt and answer fit the KV cache: as the simulated server's engine does, step for step."""
    rng = np.random.default_rng(cap)
    n = 500
    arrivals = arrival_offsets(6.0, n, rng=rng) * 1000.0
    arrivals[rng.random(n) < 0.3] = 0.0  # bursts: prompts that arrive together queue behind each other's chunks
    arrivals.sort()
    outs, prompts = rng.integers(1, 40, n), rng.integers(1, 700, n)
    cfg = EngineConfig(
        base_ms=12,
        per_seq_ms=0.35,
        per_kv_ms=0.9,
        prefill_ms_per_token=0.04,
        prefill_attention_ms=attention,
        max_num_seqs=cap,
        max_num_batched_tokens=budget,
        kv_capacity_tokens=kv_capacity,
    )
    first, last = engine_timeline(cfg, arrivals, outs, prompts)
    timeline = simulate(cfg, arrivals, outs, prompts)
    np.testing.assert_allclose(timeline.first_ms, first, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(timeline.last_ms, last, rtol=1e-12, atol=1e-6)
    if budget is not None and budget < 700:  # the budget binds: the same arrivals prefilled whole come sooner
        whole = simulate(dataclasses.replace(cfg, max_num_batched_tokens=None), arrivals, outs, prompts)
        assert not np.allclose(whole.first_ms, timeline.first_ms)


def test_batch_cap_one_is_an_md1_queue_with_the_exact_mean_wait() -> None:
    # One slot, 10 tokens of 10 ms: deterministic service S = 100 ms. Poisson at 5/s: rho = 0.5.
    # M/D/1 (Pollaczek-Khinchine): mean wait = rho * S / (2 * (1 - rho)) = 50 ms; TTFT adds the first step.
    rate, service_ms = 5.0, 100.0
    rho = rate * service_ms / 1000.0
    arrivals = arrival_offsets(rate, 200_000, rng=np.random.default_rng(7)) * 1000.0
    timeline = simulate(EngineConfig(base_ms=10.0, per_seq_ms=0.0, max_num_seqs=1), arrivals, 10)
    wait = rho * service_ms / (2 * (1 - rho))
    assert float(np.mean(timeline.ttft_ms[1000:])) == pytest.approx(wait + 10.0, rel=0.03)
    assert float(np.max(timeline.tpot_ms)) == pytest.approx(10.0)


def test_t_quantiles() -> None:
    assert t975(1) == 12.706 and t975(10) == 2.228
    assert t975(20) == pytest.approx(2.086, abs=0.002) and t975(60) == pytest.approx(2.000, abs=0.002)


def test_the_chapters_40_qps_needs_7_replicas_and_6_settles_as_failing() -> None:
    plan = plan_from_law(LAW, PlanRequest(slos=SLOS, qps=40, output_tokens=200, seed=1))
    assert plan.max_batch == 87 and plan.sizing is not None and plan.sizing.replicas_no_headroom == 6
    assert plan.recommended_replicas == 7
    assert plan.simulated is not None and plan.simulated.replicas == 7 and plan.simulated.verdict == "pass"
    below = plan.simulated_below
    assert below is not None and below.replicas == 6 and below.verdict == "fail"
    ttft = below.estimate(Metric.TTFT)
    assert ttft is not None and ttft.low_ms > 1000.0  # the whole interval above the SLO: settled, not a coin flip


def test_a_settled_pass_has_its_interval_below_the_limit_and_an_unstable_count_is_not_simulated() -> None:
    law = EngineConfig(max_num_seqs=87)
    ok = simulate_replicas(law, 8, 40.0, (TTFT_1S,), Traffic(output_tokens=200), size=(1000, 5000))
    assert ok.verdict == "pass" and all(e.high_ms <= 1000.0 for e in ok.estimates)
    assert ok.requests == ok.replications * 6000
    unstable = simulate_replicas(law, 5, 40.0, (TTFT_1S,), Traffic(output_tokens=200))
    assert unstable.verdict == "unstable" and unstable.utilization > 1 and unstable.requests == 0


def test_an_interval_that_straddles_the_limit_at_the_cap_is_unsettled_and_never_passes() -> None:
    law = EngineConfig(max_num_seqs=87)
    probe = simulate_replicas(
        law, 6, 40.0, (TTFT_1S,), Traffic(output_tokens=200), size=(500, 1500), max_replications=5
    )
    e = probe.estimates[0]
    straddling = SloTarget(metric=Metric.TTFT, percentile=95, limit=(e.low_ms + e.high_ms) / 2)
    again = simulate_replicas(
        law, 6, 40.0, (straddling,), Traffic(output_tokens=200), size=(500, 1500), max_replications=5
    )
    assert again.verdict == "unsettled" and not again.passed


def test_exact_decimals_in_the_utilisation_rule() -> None:
    # 46.4 x 200 = 9280 tok/s over 0.58 x 1600: exactly 10 (binary floats give 927.9999... and 11)
    law = StepModel.given(20.0, 0.125)
    plan = plan_from_law(
        law,
        PlanRequest(
            slos=(SloTarget(metric=Metric.TPOT, percentile=95, limit=25.0),),
            qps=46.4,
            output_tokens=200,
            max_utilization=0.58,
        ),
    )
    assert plan.max_batch == 40 and plan.recommended_replicas == 10
    assert replicas_for(46.4, 200, 1600.0, max_utilization=0.58).replicas_at_utilization == 10


@settings(max_examples=12, deadline=None)
@given(
    base=st.sampled_from([10.0, 25.0, 40.0]),
    slope=st.sampled_from([0.1, 0.4, 1.0]),
    qps=st.sampled_from([2.0, 9.5, 40.0]),
    tokens=st.sampled_from([16, 64]),
    utilization=st.sampled_from([0.5, 0.8, 1.0]),
)
def test_the_recommendation_is_never_below_the_utilisation_rule(
    base: float, slope: float, qps: float, tokens: int, utilization: float
) -> None:
    slos = (
        SloTarget(metric=Metric.TPOT, percentile=95, limit=base + 30 * slope),
        SloTarget(metric=Metric.TTFT, percentile=95, limit=10 * base),
    )
    plan = plan_from_law(
        StepModel.given(base, slope), PlanRequest(slos=slos, qps=qps, output_tokens=tokens, max_utilization=utilization)
    )
    assert plan.sizing is not None and plan.recommended_replicas is not None
    assert plan.recommended_replicas >= plan.sizing.replicas_at_utilization
    assert plan.simulated is not None and plan.recommended_replicas >= plan.simulated.replicas
    assert plan.simulated.passed


def test_burstier_arrivals_never_need_fewer_replicas() -> None:
    def replicas(arrival: str, burstiness: float) -> int:
        request = PlanRequest(
            slos=SLOS,
            qps=40,
            output_tokens=200,
            arrival=arrival,  # type: ignore[arg-type]
            burstiness=burstiness,
            max_utilization=1.0,
        )
        plan = plan_from_law(LAW, request)
        assert plan.simulated is not None
        return plan.simulated.replicas

    assert replicas("gamma", 0.25) >= replicas("poisson", 1.0)


def test_simulation_is_seeded_and_light_load_queues_nothing() -> None:
    law = EngineConfig(max_num_seqs=87)
    slos = (SloTarget(metric=Metric.TTFT, percentile=95, limit=100.0),)
    a = simulate_replicas(law, 80, 40.0, slos, Traffic(output_tokens=50, seed=3), size=(200, 2000))
    assert a == simulate_replicas(law, 80, 40.0, slos, Traffic(output_tokens=50, seed=3), size=(200, 2000))
    ttft = a.estimates[0]
    assert ttft.value_ms <= 25.4 * 2 + 1e-6  # at most a partial step, then its own step


def test_the_sizing_simulation_takes_prefill_fitted_from_ttft_at_concurrency_1() -> None:
    """One step model: the decode law 25 + 0.4b with 0.3125 ms of prefill per prompt token, 64 prompt and
    32 output tokens per request. TPOT holds prefill's share (0.3125 * 64 / 32 = 0.625 ms per sequence),
    TTFT at c=1 the whole prompt's (20 ms); the plan splits them back, so that the simulation counts
    prefill once (issue 24, item 5). A share this large beside the slope is split by running the closed
    loop (``planner.capacity.decode_fit``): the decode law is the one whose closed loop, with the prefill,
    reads these TPOTs; part of the share lands in clients' waits for a first token, so its slope is
    above 0.4 and below the 1.025 measured."""
    import dataclasses

    from loadgen.histogram import LatencyHistogram
    from planner import plan_from_results
    from tests.planner.synthetic import law_sweep, sweep_results

    levels = list(law_sweep(25.0, 0.4 + 0.625, 128, (1, 4, 16, 32)))
    ttft_sent = LatencyHistogram()  # c=1: one decode step of batch 1 (25.4 ms) plus 20 ms of prefill
    ttft_sent.record_many_us(np.full(300, 45_400, dtype=np.int64))
    levels[0] = dataclasses.replace(levels[0], histograms={**levels[0].histograms, Metric.TTFT_SENT: ttft_sent})
    request = PlanRequest(slos=SLOS, qps=40, output_tokens=200, seed=1)
    plan = plan_from_results(sweep_results(tuple(levels)), request)
    assert plan.prefill is not None and plan.prefill.source == "fitted from TTFT at c=1"
    assert plan.prefill.ms_per_token == pytest.approx(20.0 / 64, rel=0.02)
    assert plan.fit is not None and plan.fit.per_seq_ms == pytest.approx(1.025, rel=0.02)
    assert plan.decode is not None and 0.4 < plan.decode.per_seq_ms < 1.025
    engine = EngineConfig(base_ms=plan.decode.base_ms, per_seq_ms=plan.decode.per_seq_ms,
                          prefill_ms_per_token=plan.prefill.ms_per_token, max_num_seqs=32)  # fmt: skip
    for level in levels:
        looped = run_closed_loop(engine, round(level.load.value), LengthSample.fixed(64, 32)).tpot_ms_at(None)
        # within the fit's tolerance: these levels follow the by-hand mean step, which no closed loop does exactly
        assert looped == pytest.approx(level.mean_ms(Metric.TPOT), rel=0.05), level.load.label
    assert "prefill 0.31" in (plan.replicas_method or "") and "fitted from TTFT at c=1" in (plan.replicas_method or "")
    assert not any("more than the fitted slope holds" in w for w in plan.warnings)
    without = plan_from_results(sweep_results(tuple(levels)), dataclasses.replace(request, prefill_ms_per_token=0.0))
    assert without.decode is None
    # the same mean step either way; with prefill the admitting steps are longer, so TTFT can only grow
    assert plan.recommended_replicas >= without.recommended_replicas  # type: ignore[operator]
