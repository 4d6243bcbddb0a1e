"""The HTML report's plots say what they draw (captions follow the data, axes fit it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.results import load
from planner import PlanRequest, plan_from_results

DATA = Path(__file__).parents[1] / "data"


@pytest.mark.parametrize(
    ("name", "caption"),
    [
        ("results_v1_sweep.json", "the knee marked at concurrency 16.0"),
        ("results_v1.json", "no knee in the range swept"),
    ],
)
def test_the_ttft_caption_claims_a_knee_only_when_one_is_drawn(name: str, caption: str) -> None:
    from planner.reports.plots import ttft_vs_load  # matplotlib, imported only where a plot is drawn (as the CLI does)

    plan = plan_from_results(load(DATA / name), PlanRequest(slos=()))
    assert ttft_vs_load(plan).caption.endswith(caption)
