"""The fleet plan: hand-checkable cases (tests/planner/test_fleet_trace.py holds the replayed diurnal trace)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.engine import EngineConfig
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner import PlanRequest, StepModel, plan_from_law, plan_from_results
from planner.fleet.demand import Demand, constant_demand, demand_from_arrivals, demand_from_series
from planner.fleet.fleet_plan import (
    Variant,
    lag_buckets,
    lower_bound,
    plan_fleet,
    provision,
    switches,
    variant_capacity,
    with_spares,
)
from planner.fleet.fleet_replay import ReplicaKind, arrivals_for, replay
from tests.planner.synthetic import law_sweep, sweep_results

TPOT_60 = SloTarget(metric=Metric.TPOT, percentile=50.0, limit=60.0)
OUTPUT = 200


def variant(
    name: str, base: float, slope: float, cost: float | None = None, *, slos: tuple[SloTarget, ...] = (TPOT_60,)
) -> Variant:
    plan = plan_from_law(StepModel.given(base, slope), PlanRequest(slos=tuple(slos), output_tokens=OUTPUT))
    return Variant(
        name=name,
        plan=plan,
        output_tokens=OUTPUT,
        prompt_tokens=0.0,
        source=f"law {base}+{slope}b",
        cost_per_gpu_hour=cost,
    )


def test_a_rate_series_is_averaged_over_each_bucket_exactly() -> None:
    d = demand_from_series([0, 30, 90], [2, 6, 10], 60, "series")
    # [0, 60): 30 s at 2 and 30 s at 6; [60, 120): 30 s at 6 and 30 s at 10 (the last row holds 60 s, its step)
    assert d.rates == pytest.approx((4.0, 8.0, 10.0))
    assert d.period_s == 180


def test_arrivals_are_counted_per_bucket() -> None:
    d = demand_from_arrivals([0.0, 0.5, 1.0, 59.9, 60.0, 125.0], 60, "trace")
    assert d.rates == pytest.approx((4 / 60, 1 / 60, 1 / 60))
    assert d.arrivals_s is not None and len(d.arrivals_s) == 6


def test_mu_is_the_utilisation_targets_rate_without_a_queueing_slo() -> None:
    # 20 + 0.5b under 60 ms: batch 80, 80,000/60 tok/s; 0.8 of it over 200 tokens = 16/3 requests/s
    cap = variant_capacity(variant("l40", 20, 0.5), (TPOT_60,))
    assert cap.batch == 80 and cap.mu_rps is not None and float(cap.mu_rps) == pytest.approx(16 / 3)


def test_a_two_level_step_needs_exactly_ceil_lambda_over_mu_in_each_bucket() -> None:
    cap = variant_capacity(variant("l40", 20, 0.5), (TPOT_60,))
    demand = Demand(bucket_s=60.0, rates=(2.0, 6.0, 16.0, 16.5, 2.0), source="steps")
    fleet = plan_fleet(demand, [cap], (TPOT_60,)).chosen
    assert fleet is not None and fleet.held
    mu = 16 / 3
    assert fleet.replicas() == tuple(math.ceil(r / mu) for r in demand.rates) == (1, 2, 3, 4, 1)
    assert fleet.gpu_hours == pytest.approx(11 / 60)


def test_a_constant_qps_equals_todays_plan() -> None:
    for qps in (7.3, 40.0, 46.4):
        request = PlanRequest(slos=(TPOT_60,), output_tokens=OUTPUT, qps=qps)
        today = plan_from_law(StepModel.given(20, 0.5), request)
        cap = variant_capacity(variant("l40", 20, 0.5), (TPOT_60,))
        fleet = plan_fleet(constant_demand(qps), [cap], (TPOT_60,)).chosen
        assert fleet is not None and fleet.replicas() == (today.recommended_replicas,)


def test_a_twice_as_fast_variant_at_two_and_a_half_times_the_price_loses_until_the_slo_needs_its_batch() -> None:
    demand = Demand(bucket_s=3600.0, rates=(20.0,), source="steady")
    for slo, winner in (
        (SloTarget(metric=Metric.TPOT, percentile=50.0, limit=60.0), "slow"),
        (SloTarget(metric=Metric.TPOT, percentile=50.0, limit=25.0), "fast"),
    ):
        slow = variant_capacity(variant("slow", 20, 0.5, 1.0, slos=(slo,)), (slo,))
        fast = variant_capacity(variant("fast", 10, 0.25, 2.5, slos=(slo,)), (slo,))
        plan = plan_fleet(demand, [slow, fast], (slo,))
        assert plan.chosen is not None and plan.chosen.name == winner
        assert plan.objective == "USD"
    # under 25 ms the slow one runs batch 10 (20 + 0.5 x 10 = 25), the fast one 60 (10 + 0.25 x 60): six times
    # the capacity at 2.5 times the price; under 60 ms it was 80 against 200, 2.5 times at 2.5 times
    assert slow.batch == 10 and fast.batch == 60


def test_with_a_scale_up_lag_of_one_bucket_the_ramp_bucket_pays_for_the_next_ones_replicas() -> None:
    cap = variant_capacity(variant("l40", 20, 0.5), (TPOT_60,))
    demand = Demand(bucket_s=60.0, rates=(2.0, 2.0, 12.0, 12.0, 2.0), source="ramp")
    assert lag_buckets(60.0, 60.0) == 1 and lag_buckets(61.0, 60.0) == 2 and lag_buckets(0.0, 60.0) == 0
    none, lagged = (plan_fleet(demand, [cap], (TPOT_60,), scale_up_s=s).chosen for s in (0.0, 60.0))
    assert none is not None and lagged is not None
    assert none.replicas() == (1, 1, 3, 3, 1)
    assert lagged.replicas() == (1, 3, 3, 3, 1)  # started in bucket 1 to serve from bucket 2
    assert lagged.lag_objective == pytest.approx(2 / 60)  # two replica-minutes of one GPU
    paid, serving = provision(np.asarray([[1, 1, 3, 3, 1]]), 1)
    assert paid.tolist() == [[1, 3, 3, 3, 1]] and serving.tolist() == [[1, 1, 3, 3, 1]]  # scaling down is at once


def test_spares_are_paid_in_every_bucket_and_said() -> None:
    cap = variant_capacity(variant("l40", 20, 0.5, 3.0), (TPOT_60,))
    plan = plan_fleet(Demand(bucket_s=60.0, rates=(2.0, 6.0), source="two"), [cap], (TPOT_60,), spare=1)
    assert plan.chosen is not None and plan.chosen.replicas() == (2, 3)
    assert plan.chosen.spare_objective == pytest.approx(2 * 3.0 / 60)


def test_a_mix_uses_the_cheaper_kind_for_what_is_left_over() -> None:
    big = variant_capacity(variant("big", 10, 0.25, 2.0), (TPOT_60,))  # 40/3 requests/s for 2 USD an hour
    small = variant_capacity(variant("small", 20, 0.5, 1.0), (TPOT_60,))  # 16/3 for 1: dearer per request
    rate = 2 * 40 / 3 + 2.0  # two big ones and a little more: a third big one (6) or six small (6) or 2 + 1 (5)
    plan = plan_fleet(Demand(bucket_s=3600.0, rates=(rate,), source="x"), [big, small], (TPOT_60,), mix=True)
    assert plan.chosen is not None and plan.chosen.name == "big + small"
    assert [row[0] for row in plan.chosen.need] == [2, 1] and plan.chosen.objective == pytest.approx(5.0)
    assert plan.runner_up is not None and plan.runner_up.objective == pytest.approx(6.0)


def test_a_variant_that_no_batch_serves_says_why_and_is_not_chosen() -> None:
    slo = SloTarget(metric=Metric.TPOT, percentile=50.0, limit=15.0)
    slow = variant_capacity(variant("slow", 20, 0.5, slos=(slo,)), (slo,))
    fast = variant_capacity(variant("fast", 10, 0.25, slos=(slo,)), (slo,))
    assert slow.mu_rps is None and "no batch meets the SLOs" in slow.how and "floor" in slow.how
    plan = plan_fleet(Demand(bucket_s=60.0, rates=(5.0,), source="x"), [slow, fast], (slo,))
    assert [f.name for f in plan.fleets] == ["fast"] and plan.objective == "GPU-hours"


def test_prices_for_some_variants_only_is_refused() -> None:
    a = variant_capacity(variant("a", 20, 0.5, 1.0), (TPOT_60,))
    b = variant_capacity(variant("b", 20, 0.5), (TPOT_60,))
    with pytest.raises(ValueError, match="cost for every variant or for none"):
        plan_fleet(Demand(bucket_s=60.0, rates=(1.0,), source="x"), [a, b], (TPOT_60,))


FRONTED_SLOS = (
    SloTarget(metric=Metric.TPOT, percentile=95, limit=60.0),
    SloTarget(metric=Metric.TTFT, percentile=95, limit=360.0),
)


def swept_variant(front_end_ms: float) -> Variant:
    """A variant planned from a sweep (as ``plan --variant`` does) whose every TTFT holds ``front_end_ms``
    beyond the engine: the HTTP front end, tokenising, the hop into the engine."""
    sweep = sweep_results(law_sweep(25.0, 0.4, 64, (1, 8, 16, 32), front_end_ms=front_end_ms))
    plan = plan_from_results(sweep, PlanRequest(slos=FRONTED_SLOS, output_tokens=32, seed=1, queueing_simulated=True))
    return Variant(
        name=f"fe{front_end_ms:g}",
        plan=plan,
        output_tokens=32,
        prompt_tokens=plan.prefill.prompt_tokens if plan.prefill else 0.0,
        source="sweep",
    )


def test_a_variants_capacity_holds_the_ttft_its_sweep_measured_beyond_the_engine() -> None:
    """mu_slo is simulated on the engine; a TTFT SLO is judged with what the sweep measured beyond it, as a
    one-sweep ``plan --qps`` judges it: 300 ms of a 360 ms TTFT p95 leave the engine 60 ms."""
    plain, fronted = (variant_capacity(swept_variant(fe), FRONTED_SLOS, seed=1) for fe in (0.0, 300.0))
    assert plain.mu_rps is not None and fronted.mu_rps is not None
    assert fronted.mu_rps < 0.8 * plain.mu_rps
    assert "beyond the engine (p50 " in fronted.how


def test_the_fleet_replay_judges_each_request_with_its_variants_front_end() -> None:
    fronted = variant_capacity(swept_variant(300.0), FRONTED_SLOS, seed=1)
    plan = plan_fleet(Demand(bucket_s=120.0, rates=(2.0, 6.0), source="two"), [fronted], FRONTED_SLOS, seed=1)
    assert plan.chosen is not None and plan.chosen.held
    for check in plan.chosen.checks:
        assert 300.0 < check.values_ms[0] <= 360.0  # TTFT p95: the engine's, plus the front end


@pytest.mark.parametrize("qps", [3.0, 30.0, 150.0])
def test_a_constant_qps_fleet_never_sizes_a_fronted_sweep_below_plan_qps(qps: float) -> None:
    """The two judge the same TTFT SLO on the same terms: the same sweep, the same residual. Without it the
    fleet read 1 replica at 30 requests/s and 5 at 150 where ``plan --qps`` reads 2 and 6. The fleet may
    read one more: its mu_slo is a bisection's lower end, ``plan --qps`` simulates each count."""
    sweep = sweep_results(law_sweep(25.0, 0.4, 64, (1, 8, 16, 32), front_end_ms=300.0))
    today = plan_from_results(sweep, PlanRequest(slos=FRONTED_SLOS, output_tokens=32, seed=1, qps=qps))
    fronted = variant_capacity(swept_variant(300.0), FRONTED_SLOS, seed=1)
    fleet = plan_fleet(constant_demand(qps), [fronted], FRONTED_SLOS, seed=1).chosen
    assert fleet is not None and today.recommended_replicas is not None
    assert today.recommended_replicas <= fleet.replicas()[0] <= today.recommended_replicas + 1


def test_a_bucket_that_mixes_kinds_holds_each_requests_own_kinds_addition() -> None:
    """A mix's bucket pools both kinds' requests into one statistic: each request carries what its own kind
    measured beyond its engine, at the requests its replica held at once (Little's law over the bucket)."""
    engine = EngineConfig(base_ms=20.0, per_seq_ms=1.0, max_num_seqs=16)
    mean_ttft = SloTarget(metric=Metric.TTFT, percentile=None, limit=10_000.0, mean=True)
    arrivals = arrivals_for(Demand(bucket_s=60.0, rates=(4.0,), source="x"), seed=3)
    seen: list[float] = []

    def fronted(slo: SloTarget, clients: float) -> float:
        seen.append(clients)
        return 300.0

    kinds = [
        ReplicaKind(engine=engine, mu_rps=1.0, output_tokens=64, prompt_tokens=0.0, added_ms=added)
        for added in (None, None)
    ]
    bare = replay(arrivals, kinds, np.asarray([[1], [1]]), (mean_ttft,), 1)[0].values_ms[0]
    kinds[0] = ReplicaKind(engine=engine, mu_rps=1.0, output_tokens=64, prompt_tokens=0.0, added_ms=fronted)
    mixed = replay(arrivals, kinds, np.asarray([[1], [1]]), (mean_ttft,), 1)[0].values_ms[0]
    share = float(np.mean(arrivals.draw < 0.5))  # equal capacities: the lower half of the draws go to the first
    assert mixed - bare == pytest.approx(300.0 * share)
    e2e_s = 64 * (engine.base_ms + engine.per_seq_ms * 2) / 1000  # about two sequences at once at 2 requests/s
    assert seen and seen[0] == pytest.approx(2.0 * e2e_s, rel=0.3)


def test_a_demand_too_large_to_replay_whole_is_replayed_on_a_sample_of_the_fleet_alike() -> None:
    """Issue 57 R1: --qps 30000 created every arrival of the period (3 GB; 10^6 req/s a MemoryError). Past
    ``most`` arrivals each sampled replica draws its own Poisson stream at its share of each bucket's rate:
    the buckets read as the whole replay does, within sampling noise, from a third of the requests."""
    engine = EngineConfig(base_ms=20.0, per_seq_ms=1.0, max_num_seqs=16)
    p95 = SloTarget(metric=Metric.TTFT, percentile=95.0, limit=10_000.0)
    demand = Demand(
        bucket_s=60.0, rates=(24.0, 48.0, 36.0), source="ramp"
    )  # 4 requests/s a replica: about half its capacity
    serving = np.asarray([[6, 12, 9]])
    kinds = [ReplicaKind(engine=engine, mu_rps=8.0, output_tokens=64, prompt_tokens=128.0)]
    whole = replay(arrivals_for(demand, seed=3), kinds, serving, (p95,), 3)
    sample = arrivals_for(demand, seed=3, most=2_000)
    assert "on a sample of the fleet" in sample.source and not len(sample.times_s)
    sampled = replay(sample, kinds, serving, (p95,), 3)
    for a, b in zip(whole, sampled):
        assert b.requests == pytest.approx(a.requests, rel=0.1)  # the bucket's offered count
        assert b.values_ms[0] == pytest.approx(a.values_ms[0], rel=0.15)
    slower = [
        ReplicaKind(
            engine=EngineConfig(base_ms=40.0, per_seq_ms=2.0, max_num_seqs=16),
            mu_rps=8.0,
            output_tokens=64,
            prompt_tokens=128.0,
        )
    ]
    assert all(s.values_ms[0] > b.values_ms[0] for s, b in zip(replay(sample, slower, serving, (p95,), 3), sampled))


def test_a_mix_never_costs_more_than_either_of_its_kinds_alone() -> None:
    """Bucket by bucket the cheapest counts switched kinds; each switch paid both through a bucket of lag, and a
    spare of the big kind ran in every bucket: the pair cost 6.17 where the small kind alone cost 4.17."""
    big = variant_capacity(variant("big", 10, 0.25, 2.0), (TPOT_60,))
    small = variant_capacity(variant("small", 20, 0.5, 1.0), (TPOT_60,))
    demand = Demand(bucket_s=600.0, rates=(3.03, 9.69, 4.25, 6.87, 5.87, 15.56, 10.29, 1.17), source="switching")
    plan = plan_fleet(demand, [big, small], (TPOT_60,), mix=True, scale_up_s=600.0, spare=1)
    cost = {f.name: f.objective for f in plan.fleets}
    assert cost["small"] == pytest.approx(25 / 6)
    assert all(v >= cost["small"] - 1e-9 for v in cost.values()) and plan.chosen is not None
    assert plan.chosen.name == "small"
    if "big + small" not in cost:  # cheapest as one kind alone: said, not listed twice
        assert plan.single_kind_pairs == ("big + small",)


def test_an_n_plus_1_spare_is_of_the_largest_kind_running_in_its_bucket() -> None:
    paid = np.asarray([[0, 2], [3, 1]])  # big: none in bucket 0; small: both
    assert with_spares(paid, [13.3, 5.3], 1).tolist() == [[0, 3], [4, 1]]


def test_a_mix_holds_its_kinds_steady_unless_switching_saves_more_than_five_percent() -> None:
    """Issue 73: the mix flapped a kind 0 <-> 4 from hour to hour to save 2.8%."""
    big = variant_capacity(variant("big", 10, 0.25, 2.0), (TPOT_60,))  # 40/3 requests/s for 2 USD an hour
    small = variant_capacity(variant("small", 20, 0.5, 1.0), (TPOT_60,))  # 16/3 for 1
    steady = Demand(bucket_s=3600.0, rates=(26.0,) * 9 + (5.0,), source="a quiet last hour")
    need = lower_bound(steady, [big, small])  # switching to one small replica for the last hour saves 1 of 38
    assert need.tolist() == [[2] * 9 + [1], [0] * 10] and switches(need) == 0
    swings = Demand(bucket_s=3600.0, rates=(26.0, 5.0) * 5, source="swings")  # here switching saves 10 of 30: 33%
    need = lower_bound(swings, [big, small])
    assert need.tolist() == [[2, 0] * 5, [0, 1] * 5] and switches(need) == 18
