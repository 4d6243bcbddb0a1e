"""Every line of a plan is a measured figure, a model figure labelled as one, or absent with a reason (issue 24)."""

from __future__ import annotations

from loadgen.results import SloTarget
from planner import PlanRequest, plan_from_results
from planner.report import plan_lines
from tests.planner.synthetic import law_sweep, sweep_results


def test_a_sweep_whose_slo_is_under_batch_ones_step_names_the_floor_not_a_smaller_batch() -> None:
    results = sweep_results(law_sweep(25, 0.4, 256, (1, 4, 16, 64)))
    plan = plan_from_results(results, PlanRequest(slos=(SloTarget.from_key("tpot_p95_ms", 24.0),), current_batch=64))
    assert plan.limits[0].quality == "below the floor" and plan.max_batch is None
    assert [f.kind for f in plan.findings] == ["slo_below_floor"]
    text = " ".join(plan_lines(plan)) + " ".join(f.message for f in plan.findings)
    assert "even batch 1 takes" in text and "faster hardware" in text
    assert "Shrink the batch" not in text and "none was measured" not in text
