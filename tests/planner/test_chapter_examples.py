"""Every number of docs/design.md's worked example, exactly, plus the float traps."""

from __future__ import annotations

import pytest

from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner import PlanRequest, StepModel, batch_utilization, plan_from_law, replicas_for

LAW = StepModel.given(25.0, 0.4)


@pytest.mark.parametrize(("slo", "batch", "step"), [(40, 37, 39.8), (60, 87, 59.8), (100, 187, 99.8)])
def test_max_batch_under_each_budget(slo: float, batch: int, step: float) -> None:
    assert LAW.max_batch(slo) == batch
    assert round(float(LAW.step_ms(batch)), 1) == step
    assert LAW.step_ms(batch + 1) > slo


def test_batch_1_and_batch_128() -> None:
    assert round(float(LAW.step_ms(1)), 1) == 25.4 and round(float(LAW.tokens_per_s(1))) == 39
    assert round(float(LAW.step_ms(128)), 1) == 76.2 and round(float(LAW.tokens_per_s(128))) == 1680


def test_replicas_for_40_qps_of_200_tokens() -> None:
    per_replica = float(LAW.tokens_per_s(87))
    assert round(per_replica, 1) == 1454.8
    plan = replicas_for(40, 200, per_replica)
    assert plan.needed_tokens_per_s == 8000
    assert plan.replicas_no_headroom == 6
    assert plan.replicas_at_utilization == 7
    assert round(plan.utilization_no_headroom, 4) == 0.9165


def test_static_batching_3_3_3_10() -> None:
    u = batch_utilization([3, 3, 3, 10])
    assert (u.useful_slot_steps, u.static_slot_steps) == (19, 40)
    assert u.static == 0.475 and u.continuous == 1.0


@pytest.mark.parametrize(
    ("base", "per_seq", "slo", "expected"),
    [
        (25.0, 0.1, 25.7, 7),
        (25.0, 0.4, 45.0, 50),
        (25.0, 0.4, 25.4, 1),
        (25.0, 0.4, 25.3, None),
        (0.3, 0.1, 0.6, 3),
        (25.0, 0.0, 30.0, None),
    ],
)
def test_float_traps_at_exact_boundaries(base: float, per_seq: float, slo: float, expected: int | None) -> None:
    assert StepModel.given(base, per_seq).max_batch(slo) == expected


def test_the_whole_what_if_example() -> None:
    request = PlanRequest(
        slos=(SloTarget(metric=Metric.TPOT, percentile=95, limit=60.0),),
        qps=40,
        output_tokens=200,
        current_batch=128,
        current_replicas=1,
        lengths=(3, 3, 3, 10),
    )
    plan = plan_from_law(LAW, request)
    assert plan.max_batch == 87
    assert round(plan.step_ms_at_max_batch or 0, 1) == 59.8
    assert round(plan.tokens_per_s_per_replica or 0, 1) == 1454.8
    assert plan.sizing is not None and plan.sizing.replicas_no_headroom == 6
    assert plan.recommended_replicas == 7  # no TTFT SLO: the 0.8 utilization target decides
    kinds = {f.kind: f.action for f in plan.findings}
    assert kinds == {"latency_breach": "shrink_batch", "capacity_shortfall": "add_replicas"}  # never crossed
    breach = next(f for f in plan.findings if f.kind == "latency_breach")
    assert "76.2 ms" in breach.message and "--max-num-seqs 87" in breach.message
    assert plan.batching is not None and plan.batching.static == 0.475
    doc = plan.to_json()
    assert (doc["max_batch"], doc["replicas_no_headroom"], doc["replicas"]) == (87, 6, 7)
    assert doc["fit"]["base_ms"] == 25.0 and doc["fit"]["per_seq_ms"] == 0.4
