"""The fleet plan on a day of traffic (tests/data/diurnal_trace.csv: 24 "hours" of 30 s, 2 to 12 requests/s)
against three variants with known laws and prices, checked by brute force and by the replay."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from loadgen.inputs.trace import load_trace
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner import PlanRequest, StepModel, plan_from_law
from planner.fleet.demand import demand_from_arrivals
from planner.fleet.fleet_plan import Variant, VariantCapacity, plan_fleet, variant_capacity
from planner.fleet.fleet_replay import ReplicaKind, arrivals_for, replay

TRACE = Path(__file__).parents[1] / "data" / "diurnal_trace.csv"
SLOS = (
    SloTarget(metric=Metric.TPOT, percentile=50.0, limit=60.0),
    SloTarget(metric=Metric.TTFT, percentile=95.0, limit=300.0),
)
BUCKET_S = 30.0
# name, base ms, per-sequence ms, USD per GPU-hour, GPUs per replica
VARIANTS = (("small", 30.0, 1.0, 1.0, 1), ("medium", 20.0, 0.4, 2.2, 1), ("large", 12.0, 0.15, 2.5, 2))


@pytest.fixture(scope="module")
def capacities() -> list[VariantCapacity]:
    out = []
    for name, base, slope, cost, gpus in VARIANTS:
        request = PlanRequest(slos=SLOS, output_tokens=100, prompt_tokens=200, prefill_ms_per_token=0.05)
        plan = plan_from_law(StepModel.given(base, slope), request)
        out.append(
            variant_capacity(
                Variant(
                    name=name,
                    plan=plan,
                    output_tokens=100,
                    prompt_tokens=200,
                    source=f"{base}+{slope}b",
                    cost_per_gpu_hour=cost,
                    gpus=gpus,
                ),
                SLOS,
            )
        )
    return out


def test_the_choice_and_its_gpu_hours_match_brute_force_and_the_replay_holds_the_slo(
    capacities: list[VariantCapacity],
) -> None:
    trace = load_trace(TRACE)
    demand = demand_from_arrivals(trace.offsets_s, BUCKET_S, TRACE.name)
    plan = plan_fleet(demand, capacities, SLOS)
    counts = np.bincount(np.floor(np.asarray(trace.offsets_s) / BUCKET_S).astype(int))
    brute = {}
    for cap in capacities:
        assert cap.mu_rps is not None
        replicas = [math.ceil(c / BUCKET_S / float(cap.mu_rps) - 1e-9) for c in counts]
        gpu_hours = sum(replicas) * cap.variant.gpus * BUCKET_S / 3600
        brute[cap.name] = (gpu_hours * (cap.variant.cost_per_gpu_hour or 0), gpu_hours)
    name = min(brute, key=lambda n: brute[n][0])
    chosen = plan.chosen
    assert chosen is not None and chosen.name == name and plan.objective == "USD"
    assert chosen.added == 0 and chosen.held
    assert chosen.gpu_hours == pytest.approx(brute[name][1]) and chosen.objective == pytest.approx(brute[name][0])
    runner = plan.runner_up
    assert runner is not None and runner.objective == pytest.approx(sorted(b[0] for b in brute.values())[1])

    # the same requests with one replica fewer in the peak bucket break TTFT p95 there
    peak = int(np.argmax(counts))
    fewer = np.asarray(chosen.need)
    fewer[0, peak] -= 1
    kind = chosen.kinds[0]
    assert kind.variant.plan.engine is not None
    replica = ReplicaKind(
        engine=kind.variant.plan.engine, mu_rps=float(kind.mu_rps or 0), output_tokens=100, prompt_tokens=200
    )
    checks = replay(arrivals_for(demand, 0), [replica], fewer, SLOS[1:], len(demand.rates))
    assert not checks[peak].passed and checks[peak].values_ms[0] > 300
    assert chosen.checks[peak].values_ms[0] < 300
