"""Replica sizing checked by simulating the fitted law in virtual time (the simulator's own engine)."""

from __future__ import annotations

import pytest

from loadgen.results import Metric, SloTarget
from planner import PlanRequest, StepModel, plan_from_law, simulate_replica

LAW = StepModel.given(25.0, 0.4)
SLOS = (SloTarget(Metric.TPOT, 95, 60.0), SloTarget(Metric.TTFT, 95, 1000.0))


def test_recommended_replicas_pass_in_simulation_and_one_fewer_fails() -> None:
    plan = plan_from_law(LAW, PlanRequest(slos=SLOS, qps=40, output_tokens=200))
    assert plan.simulated is not None and plan.simulated_below is not None
    assert plan.simulated.passed and not plan.simulated_below.passed
    assert plan.recommended_replicas == plan.simulated.replicas
    assert plan.simulated.replicas >= plan.sizing.replicas_no_headroom  # type: ignore[union-attr]
    assert "simulation" in (plan.replicas_method or "")
    assert plan.simulated.tpot_p95_ms <= 60.0  # the batch cap keeps TPOT by construction


@pytest.mark.parametrize("qps", [10, 40])
def test_burstier_arrivals_never_need_fewer_replicas(qps: float) -> None:
    def replicas(arrival: str, burstiness: float) -> int:
        request = PlanRequest(slos=SLOS, qps=qps, output_tokens=200, arrival=arrival, burstiness=burstiness)  # type: ignore[arg-type]
        r = plan_from_law(LAW, request).recommended_replicas
        assert r is not None
        return r

    assert replicas("gamma", 0.25) >= replicas("poisson", 1.0)


def test_simulation_is_seeded_and_light_load_queues_nothing() -> None:
    a = simulate_replica(LAW, 87, 0.5, 50, requests=500, seed=3)
    assert a == simulate_replica(LAW, 87, 0.5, 50, requests=500, seed=3)
    ttft_p95, tpot_p95 = a
    assert ttft_p95 <= 25.4 * 2 + 1e-6  # at most a partial step, then its own step
    assert tpot_p95 == pytest.approx(25.4, rel=0.05)
