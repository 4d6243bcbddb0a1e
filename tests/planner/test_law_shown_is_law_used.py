"""The law a percentile SLO is answered with is fitted on that percentile, shown, and never broken by the answer."""

from __future__ import annotations

import numpy as np

from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner import PlanRequest, plan_from_results
from planner.reports.plan_text import plan_lines
from tests.planner.synthetic import closed_level, law_tpots, sweep_results

SLO_35 = SloTarget(metric=Metric.TPOT, percentile=95, limit=35.0)


def noisy_sweep_to_24() -> tuple[object, ...]:
    """25 + 0.4b measured at c = 1..24 (the truth under 35 ms is 25); c=16 had a noisy tail."""
    levels = []
    for c in (1, 2, 4, 8, 16, 24):
        tpots = law_tpots(25.0, 0.4, c, 300, cv=0.01, seed=c)
        if c == 16:
            tpots[:30] *= 1.25  # 10% of its requests hit a slow patch: its p95 reads ~39 ms
        levels.append(closed_level(c, tpots))
    return tuple(levels)


def test_a_poor_p95_fit_never_yields_a_batch_whose_step_breaks_the_slo() -> None:
    plan = plan_from_results(sweep_results(noisy_sweep_to_24()), PlanRequest(slos=(SLO_35,)))  # type: ignore[arg-type]
    limit = plan.limits[0]
    assert limit.model is not None and limit.model is not plan.fit  # the p95 law, fitted on TPOT p95
    assert plan.max_batch is not None and plan.max_batch <= 25
    for law in (limit.model, plan.fit):
        assert law is not None and float(law.step_ms(plan.max_batch)) <= 35.0
    lines = "\n".join(plan_lines(plan))
    assert "tpot_p95 law: step_ms(b) = " in lines and "fitted on tpot_p95" in lines
    assert f"at batch {plan.max_batch}" in lines or f"at batch >= {plan.max_batch}" in lines


def test_a_sweep_that_never_crossed_without_a_trusted_law_gives_a_lower_bound() -> None:
    levels = tuple(closed_level(c, law_tpots(25.0, 0.4, c, 300, cv=0.01, seed=c)) for c in (1, 8))
    plan = plan_from_results(
        sweep_results(levels), PlanRequest(slos=(SloTarget(metric=Metric.TPOT, percentile=95, limit=60.0),))
    )
    limit = plan.limits[0]
    assert limit.quality == "lower bound" and limit.batch == 8 and plan.max_batch_lower_bound
    assert limit.model is not None and not limit.model.extrapolates  # two levels cannot be checked
    text = "\n".join(plan_lines(plan))
    assert "max batch >= 8" in text and "the SLO was not reached in the sweep" in text


def test_a_ttft_slo_that_does_not_bind_never_asks_for_more_data() -> None:
    levels = tuple(closed_level(c, law_tpots(25.0, 0.4, c, 300, cv=0.01, seed=c)) for c in (1, 4, 16, 32, 64))
    slos = (
        SloTarget(metric=Metric.TPOT, percentile=95, limit=35.0),
        SloTarget(metric=Metric.TTFT, percentile=95, limit=1000.0),
    )
    plan = plan_from_results(sweep_results(levels), PlanRequest(slos=slos))
    tpot, ttft = plan.limits
    assert tpot.batch is not None and 23 <= tpot.batch <= 25 and not plan.max_batch_lower_bound
    assert ttft.quality == "not binding"
    assert not any("extend the sweep" in w for w in plan.warnings)
    assert np.isfinite(plan.step_ms_at_max_batch or np.nan)
