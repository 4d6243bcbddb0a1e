"""TTFT beyond the fitted engine: the residual line per statistic, and where plans read it."""

from __future__ import annotations

import dataclasses
import re

import pytest

from loadgen.engine import EngineConfig
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner import PlanRequest, plan_from_results
from planner.capacity.sizing import Traffic, max_rate_per_replica, simulate_replicas
from planner.laws.ttft_residual import ResidualRow, fit_ttft_residual
from tests.planner.synthetic import law_sweep, sweep_results


def rows(
    at_one: float, per_client: float, *, prompts: tuple[float, ...] = (64.0, 256.0), q: float = 50.0
) -> list[ResidualRow]:
    """Levels at 1, 2, 4 and 8 clients whose measured TTFT exceeds the simulated one by the line."""
    return [
        ResidualRow(
            label=f"p{p:g} c={c}",
            clients=float(c),
            prompt_tokens=p,
            percentile=q,
            measured_ms=30.0 + at_one + per_client * (c - 1),
            simulated_ms=30.0,
        )
        for p in prompts
        for c in (1, 2, 4, 8)
    ]


def test_the_line_is_recovered_per_statistic_and_read_at_the_clients_in_flight() -> None:
    # vLLM's CPU build: about 8 ms beyond its engine at one client, +2.3 ms per added client
    residual = fit_ttft_residual(rows(8.0, 2.3) + rows(20.0, 3.0, q=95.0))
    assert residual is not None
    p50, p95 = residual.term(50.0), residual.term(95.0)
    assert (p50.at_one_ms, p50.per_client_ms) == pytest.approx((8.0, 2.3))
    assert (p95.at_one_ms, p95.per_client_ms) == pytest.approx((20.0, 3.0))
    assert residual.added_ms(50.0, 8.0) == pytest.approx(8.0 + 2.3 * 7)
    assert residual.added_ms(95.0, 0.5) == pytest.approx(20.0)  # below one client: as at one
    assert residual.max_clients == 8.0
    assert residual.reach_note(8) == "" and "up to 8 clients" in residual.reach_note(32)
    flat = fit_ttft_residual(rows(8.0, 0.0))
    assert flat is not None and flat.reach_note(32) == ""  # a line that does not grow extrapolates as itself
    assert "+2.30 ms per added client" in p50.text and "8 calibration levels at concurrency 1..8" in p95.text


def test_an_slo_reads_the_fitted_statistic_at_or_below_its_own() -> None:
    residual = fit_ttft_residual(rows(8.0, 2.0) + rows(20.0, 3.0, q=95.0))
    assert residual is not None
    assert residual.term(None).percentile == 50.0  # a mean
    assert residual.term(90.0).percentile == 50.0  # never a larger residual than measured for it
    assert residual.term(99.0).percentile == 95.0
    assert residual.slo_added_ms(SloTarget(metric=Metric.TTFT, percentile=95, limit=500.0), 3.0) == pytest.approx(26.0)
    assert residual.slo_added_ms(
        SloTarget(metric=Metric.E2E, percentile=None, limit=900.0, mean=True), 3.0
    ) == pytest.approx(12.0)


def test_a_simulation_that_over_predicts_is_never_taken_as_a_discount() -> None:
    falling = fit_ttft_residual(rows(5.0, -1.0))
    assert falling is not None and falling.term(50.0).per_client_ms == pytest.approx(-1.0)
    assert falling.added_ms(50.0, 8.0) == pytest.approx(5.0)  # as at one client, not 5 - 7
    below = fit_ttft_residual(rows(-4.0, 0.0))
    assert below is not None and below.added_ms(50.0, 1.0) == 0.0


def test_one_concurrency_gives_the_median_and_no_slope() -> None:
    one = [
        ResidualRow(
            label=f"r{k}", clients=4.0, prompt_tokens=64.0, percentile=50.0, measured_ms=40.0 + k, simulated_ms=30.0
        )
        for k in range(5)
    ]
    residual = fit_ttft_residual(one)
    assert residual is not None
    term = residual.term(50.0)
    assert term.line is None and term.at_one_ms == 12.0 and term.per_client_ms == 0.0
    assert fit_ttft_residual([]) is None


def test_a_residual_that_changes_with_the_prompt_is_said() -> None:
    steady = fit_ttft_residual(rows(8.0, 2.0))
    assert steady is not None and steady.prompt_note() == ""
    by_prompt = rows(8.0, 2.0, prompts=(64.0,)) + rows(20.0, 2.0, prompts=(256.0,))
    grows = fit_ttft_residual(by_prompt)
    assert grows is not None
    note = grows.prompt_note()
    assert "64 prompt tokens" in note and "256" in note and "short" in note


ENGINE = EngineConfig(base_ms=20.0, per_seq_ms=1.0, max_num_seqs=16)
TTFT_P95 = SloTarget(metric=Metric.TTFT, percentile=95, limit=120.0)


def test_the_sizing_simulation_adds_the_residual_at_littles_requests_in_flight() -> None:
    seen: list[float] = []

    def added(slo: SloTarget, clients: float) -> float:
        seen.append(clients)
        return 0.0

    rate = 2.0  # requests/s, each 64 tokens of about 22 ms steps: ~1.4 s in flight, ~2.9 requests at once
    simulate_replicas(
        ENGINE, 1, rate, (TTFT_P95,), Traffic(output_tokens=64, seed=1, added_ms=added), max_replications=3
    )
    assert seen
    e2e_s = 64 * (ENGINE.base_ms + ENGINE.per_seq_ms * 3) / 1000
    for clients in seen:
        assert clients == pytest.approx(rate * e2e_s, rel=0.25)


def test_a_residual_lowers_the_largest_rate_one_replica_holds() -> None:
    bare, _ = max_rate_per_replica(ENGINE, (TTFT_P95,), Traffic(output_tokens=64, seed=1))
    loaded, _ = max_rate_per_replica(
        ENGINE, (TTFT_P95,), Traffic(output_tokens=64, seed=1, added_ms=lambda slo, clients: 10.0 * clients)
    )
    assert bare is not None and loaded is not None
    assert loaded < 0.9 * bare


def test_levels_repeated_across_sweeps_fit_a_line_where_a_half_holds_one_concurrency() -> None:
    # two sweeps at 1, 8, 8: the upper half of the sorted levels is all c=8 (a bend check cannot run there)
    repeated = [
        ResidualRow(
            label=f"r{p}c{c}",
            clients=float(c),
            prompt_tokens=p,
            percentile=50.0,
            measured_ms=30.0 + 2.0 + 0.5 * (c - 1),
            simulated_ms=30.0,
        )
        for p in (64.0, 256.0)
        for c in (1, 8, 8)
    ]
    residual = fit_ttft_residual(repeated)
    assert residual is not None and residual.term(50.0).per_client_ms == pytest.approx(0.5)


def test_a_sweep_whose_ttft_holds_a_front_end_is_sized_with_it() -> None:
    """One sweep, two servers: the same engine, one with 300 ms of front end in every TTFT. The sizing
    simulation runs the engine; it used to judge a TTFT SLO as if the front end were not there."""
    slos = (
        SloTarget(metric=Metric.TPOT, percentile=95, limit=60.0),
        SloTarget(metric=Metric.TTFT, percentile=95, limit=2000.0),
    )
    request = PlanRequest(slos=slos, qps=20, output_tokens=32, seed=1)
    plain = plan_from_results(sweep_results(law_sweep(25.0, 0.4, 64, (1, 8, 16, 32))), request)
    slowed = plan_from_results(sweep_results(law_sweep(25.0, 0.4, 64, (1, 8, 16, 32), front_end_ms=300.0)), request)
    assert plain.simulated is not None and slowed.simulated is not None
    bare, fronted = (p.simulated.estimate(Metric.TTFT) for p in (plain, slowed))  # type: ignore[union-attr]
    assert bare is not None and fronted is not None
    assert fronted.value_ms > bare.value_ms + 250  # the engine's own TTFT, plus the rest the sweep measured
    assert "what the levels measured beyond the engine (p50 " in (slowed.replicas_method or "")
    added = re.search(r"\(p50 (\S+) ms \+ (\S+)/client, p95 (\S+) ms \+ (\S+)/client, mean (\S+) ms \+ (\S+)/client\)",
                      plain.replicas_method or "")  # fmt: skip
    assert added is not None and all(float(v) < 1.0 for v in added.groups())  # none there (the p95 of a few samples)


def test_the_growth_per_client_is_read_in_proportion_to_the_prompts_prefill() -> None:
    """Prompts the engine prefills in 10 and 40 ms alone, whose TTFT grew beyond the engine by 0.5 and 2 ms per
    added client: one line in proportion to the prefill, read at another prompt in proportion too."""

    def level(prefill: float, per_client: float, c: int) -> ResidualRow:
        return ResidualRow(
            label=f"p{prefill:g} c={c}", clients=float(c), prompt_tokens=prefill * 10, percentile=50.0,
            measured_ms=30.0 + 5.0 + per_client * (c - 1), simulated_ms=30.0, prefill_ms=prefill,
        )  # fmt: skip

    rows = [level(10.0, 0.5, c) for c in (1, 2, 4, 8)] + [level(40.0, 2.0, c) for c in (1, 2, 4, 8)]
    residual = fit_ttft_residual(rows)
    assert residual is not None
    term = residual.term(50.0)
    assert term.reference_ms is not None and "in proportion to a prompt's prefill" in term.text
    at_80 = residual.at_prompt(80.0)
    assert at_80.added_ms(50.0, 5.0) == pytest.approx(5.0 + 4.0 * 4)  # 4 ms per client at twice the longest
    assert residual.prompt_note() == ""  # the proportion explains the prompts' difference
    same = [dataclasses.replace(row, prefill_ms=None) for row in rows]  # no prefill known: one line for all
    flat = fit_ttft_residual(same)
    assert flat is not None and flat.term(50.0).reference_ms is None
    assert flat.at_prompt(80.0).added_ms(50.0, 5.0) == flat.added_ms(50.0, 5.0)
    assert "differs with the prompt" in flat.prompt_note()
