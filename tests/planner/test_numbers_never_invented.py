"""Every line of a plan is a measured figure, a model figure labelled as one, or absent with a reason (issue 24)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from loadgen.engine import EngineConfig
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner import PlanRequest, StepModel, plan_from_law, plan_from_results
from planner.reports.plan_text import plan_lines
from planner.reports.report import goodput_rule, level_verdicts, slo_verdicts
from planner.simulation.replica_sim import simulate
from tests.planner.synthetic import closed_level, law_sweep, law_tpots, sweep_results


def test_a_sweep_whose_slo_is_under_batch_ones_step_names_the_floor_not_a_smaller_batch() -> None:
    results = sweep_results(law_sweep(25, 0.4, 256, (1, 4, 16, 64)))
    plan = plan_from_results(results, PlanRequest(slos=(SloTarget.from_key("tpot_p95_ms", 24.0),), current_batch=64))
    assert plan.limits[0].quality == "below the floor" and plan.max_batch is None
    assert [f.kind for f in plan.findings] == ["slo_below_floor"]
    text = " ".join(plan_lines(plan)) + " ".join(f.message for f in plan.findings)
    assert "even batch 1 takes" in text and "faster hardware" in text
    assert "Shrink the batch" not in text and "none was measured" not in text


def test_what_if_prefill_is_in_every_tpot_and_throughput_figure_and_the_engine_agrees() -> None:
    """--law 25+0.25b with 0.5 ms of prefill per prompt token, 128 prompt / 200 output tokens (issue 24, item 5).

    Without the prefill in the steps batch 100 would read 50 ms and 2,000 tok/s; with it each running
    sequence adds 0.5 * 128 / 200 = 0.32 ms to the mean step, so the SLO allows 43 (49.51 ms). The
    simulated engine, fed the stated law and the prefill, must show the same mean step at that batch.
    """
    request = PlanRequest(
        slos=(SloTarget.from_key("tpot_p95_ms", 50.0),), output_tokens=200, prefill_ms_per_token=0.5, prompt_tokens=128
    )
    plan = plan_from_law(StepModel.given(25, 0.25), request)
    assert plan.max_batch == 43 and plan.step_ms_at_max_batch == pytest.approx(25 + 0.57 * 43)
    assert plan.tokens_per_s_per_replica == pytest.approx(43 * 1000 / (25 + 0.57 * 43))
    assert plan.decode is not None and (plan.decode.base_ms, plan.decode.per_seq_ms) == (25, 0.25)
    assert any(line.startswith("prefill: 0.5 ms/token x 128 prompt tokens") for line in plan_lines(plan))
    law = EngineConfig(base_ms=25, per_seq_ms=0.25, prefill_ms_per_token=0.5, max_num_seqs=43)
    # arrivals evenly spaced 2% faster than the replica completes them: the batch stays full and its
    # admissions spread over the steps, as in a steady serving state
    assert plan.step_ms_at_max_batch is not None
    capacity_rps = 43 * 1000 / (plan.step_ms_at_max_batch * 200)
    timeline = simulate(law, np.arange(4000) * 1000 / (1.02 * capacity_rps), 200, 128)
    steady = timeline.tpot_ms[1000:3000]
    assert float(np.mean(steady)) == pytest.approx(plan.step_ms_at_max_batch, rel=0.02)


def test_an_overloaded_replica_count_is_called_overloaded_not_given_a_percentile() -> None:
    """Utilisation counts prefill: 1 replica at 6 QPS of 128 + 200 tokens on 25+0.25b is 1.38x its capacity."""
    request = PlanRequest(
        slos=(SloTarget.from_key("tpot_p95_ms", 50.0), SloTarget.from_key("ttft_p95_ms", 2000.0)),
        qps=6,
        output_tokens=200,
        prefill_ms_per_token=0.5,
        prompt_tokens=128,
    )
    plan = plan_from_law(StepModel.given(25, 0.25), request)
    assert plan.recommended_replicas == 2
    assert plan.simulated_below is not None and plan.simulated_below.verdict == "unstable"
    assert plan.simulated_below.utilization == pytest.approx(6 / (43 * 1000 / (25 + 0.57 * 43) / 200))
    assert "1 overloaded (utilization 1.38" in " ".join(plan_lines(plan))


def test_a_plateau_is_not_quoted_as_a_measured_batch() -> None:
    """Every unsaturated level meets the SLO: B = 40 caps the batch, and nothing measured crossed it (item 9)."""
    plan = plan_from_results(
        sweep_results(law_sweep(25, 0.4, 40, (1, 4, 16, 32, 64, 96))),
        PlanRequest(slos=(SloTarget.from_key("tpot_p95_ms", 100.0),)),
    )
    limit = plan.limits[0]
    assert limit.quality == "capped at max batch" and limit.measured_batch is None and limit.batch == 40
    line = next(line for line in plan_lines(plan) if line.startswith("tpot_p95_ms <= 100"))
    assert "measured 40" not in line and "the server saturates at B = 40" in line


def test_goodput_explains_itl_only_when_an_itl_slo_is_given() -> None:
    assert "ITL" not in goodput_rule((SloTarget.from_key("tpot_p95_ms", 50.0),))
    assert "ITL is a request's largest gap" in goodput_rule((SloTarget.from_key("itl_p99_ms", 80.0),))


def test_a_level_the_report_does_not_trust_passes_no_slo() -> None:
    few = closed_level(8, law_tpots(25, 0.4, 8, 20, cv=0.01, seed=1))  # 20 samples cannot bound a p95
    results = sweep_results((few,))
    slos = (SloTarget.from_key("tpot_p95_ms", 50.0),)
    table = slo_verdicts(results, slos, level_verdicts(results, None, slos))
    assert table is not None and table.rows[0][1].startswith("untrusted (")


def test_a_ttft_slo_caps_the_batch_only_where_no_simulation_judges_it() -> None:
    """Item 9: closed-loop TTFT at a concurrency was a batch limit beside the open-loop simulation of the
    same SLO. With a target QPS the simulation judges it (as in what-if mode); without one it is all we have."""
    results = sweep_results(law_sweep(25, 0.4, 256, (1, 4, 16, 32)))
    slos = (SloTarget.from_key("tpot_p95_ms", 40.0), SloTarget.from_key("ttft_p95_ms", 1000.0))
    sized = plan_from_results(results, PlanRequest(slos=slos, qps=5, output_tokens=32, seed=1))
    assert [lim.slo.key for lim in sized.limits] == ["tpot_p95_ms"]
    assert any(w.startswith("ttft_p95: judged by the sizing simulation at 5 QPS") for w in sized.warnings)
    assert sized.simulated is not None and sized.simulated.estimate(Metric.TTFT) is not None
    unsized = plan_from_results(results, PlanRequest(slos=slos))
    assert [lim.slo.key for lim in unsized.limits] == ["tpot_p95_ms", "ttft_p95_ms"]


def test_a_law_fitted_below_zero_at_batch_zero_sizes_with_a_step_no_faster_and_says_so() -> None:
    """A real engine's sweep (vLLM's CPU build) fitted a base of -1.6 ms: the simulated engine refused it
    and the sweep ended in a traceback after saving. The simulation runs base 0 (steps no shorter than the
    law's) and the plan says why."""
    levels = tuple(closed_level(c, law_tpots(-2.0, 1.0, c, 400, cv=0.02, seed=c)) for c in (1, 4, 8, 16, 24))
    request = PlanRequest(slos=(SloTarget.from_key("tpot_p95_ms", 30.0),), qps=4.0, output_tokens=32)
    plan = plan_from_results(sweep_results(levels), request)
    assert plan.fit is not None and plan.fit.base_ms < 0
    assert plan.recommended_replicas is not None
    assert any("below zero" in w and "runs it at 0" in w for w in plan.warnings)
    # with a TTFT at concurrency 1 the prefill estimate would take the whole slope: it is not split off
    with_prefill = plan_from_results(sweep_results(levels), dataclasses.replace(request, prefill_ms_per_token=1.0))
    assert with_prefill.recommended_replicas is not None
    assert any("no base above zero to hold prefill apart" in w for w in with_prefill.warnings)
