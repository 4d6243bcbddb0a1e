"""An SLO set exactly at a step of a law answers that batch, through the whole plan (issue 24, item 6).

Binary floats put ``25 + 0.4 * 87`` at 59.800000000000004; the planner reads every law and
limit as the decimal it prints as, so a step exactly at the SLO meets it everywhere: in the
inversion, in the check that every law shown meets its SLO, and in the printed plan.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from loadgen.slo_target import SloTarget
from planner import PlanRequest, StepModel, plan_from_law

LAWS = ("25+0.4", "25+0.1", "12.5+0.35", "7.3+0.07", "40+1.3", "18.25+0.15", "3.1+0.03")
BATCHES = range(1, 201)


@pytest.mark.parametrize("law", LAWS)
def test_every_slo_set_exactly_at_a_step_gives_that_batch(law: str) -> None:
    base, slope = (Decimal(x) for x in law.split("+"))
    model = StepModel.given(float(base), float(slope))
    wrong = []
    for b in BATCHES:
        limit = float(base + slope * b)  # the decimal a user types: "59.8"
        plan = plan_from_law(model, PlanRequest(slos=(SloTarget.from_key("tpot_p95_ms", limit),)))
        if (model.max_batch(limit), plan.max_batch, plan.max_batch_method, plan.warnings) != (
            b,
            b,
            "the largest batch under tpot_p95",
            (),
        ):
            wrong.append((b, limit, plan.max_batch, plan.max_batch_method, plan.warnings))
    assert not wrong, f"{len(wrong)} of {len(BATCHES)} boundary SLOs on {law}b answered wrong: {wrong[:3]}"


def test_the_case_in_the_issue() -> None:
    plan = plan_from_law(StepModel.given(25, 0.4), PlanRequest(slos=(SloTarget.from_key("tpot_p95_ms", 59.8),)))
    assert plan.max_batch == 87 and plan.step_ms_at_max_batch == pytest.approx(59.8) and not plan.warnings
