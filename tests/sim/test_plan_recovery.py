"""The planner recovers the simulator's known law from real sweeps over loopback sockets."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import Metric, SloTarget, load
from planner import PlanRequest, plan_from_results

runner = CliRunner()


def sweep(tmp_path: Path, sim: str, levels: str, output_tokens: int = 16, prompt_tokens: int = 8) -> Path:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"target: {{sim: {sim}}}\napi: completions\n"
        f"workload: {{output_tokens: {output_tokens}, prompt_tokens: {prompt_tokens}}}\n"
        f"load: {{levels: [{levels}], duration_s: 2, warmup_s: 0.5}}\nstop: {{stop_on_saturation: false}}\n"
    )
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "-o", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    return out


def test_law_and_max_batch_are_recovered(tmp_path: Path) -> None:
    out = sweep(tmp_path, "{max_num_seqs: 64}", "1, 4, 16, 32, 64, 96, 128")
    plan = plan_from_results(load(out), PlanRequest(slos=(SloTarget(Metric.TPOT, 95, 40.0),)))
    assert plan.fit is not None
    assert plan.fit.base_ms == pytest.approx(25.0, rel=0.05)
    assert plan.fit.per_seq_ms == pytest.approx(0.4, rel=0.10)
    assert plan.saturation is not None and plan.saturation.max_batch == pytest.approx(64, abs=3)
    states = dict(zip([lv.label for lv in plan.observations.levels], plan.saturation.states))  # type: ignore[union-attr]
    assert states["c=96"] == states["c=128"] == "saturated"
    assert states["c=1"] == states["c=16"] == "unsaturated"
    # 40 ms allows 37 by the law. The model answer recovers it; the decision is never above it
    # nor above B (saturated levels are never compliant). With 2 s levels a transient can push one
    # level's p95 up: then the measured answer is lower, and the plan must say the two disagree.
    limit = plan.limits[0]
    assert limit.model_batch is not None and 34 <= limit.model_batch <= 38
    assert plan.max_batch is not None and plan.max_batch <= limit.model_batch <= 64
    if limit.measured_batch is not None and abs(limit.measured_batch - limit.model_batch) > 4:
        assert "differ" in limit.note


def test_every_level_under_the_slo_is_capped_by_the_max_batch(tmp_path: Path) -> None:
    out = sweep(tmp_path, "{max_num_seqs: 16}", "4, 8, 16, 32, 64")
    plan = plan_from_results(load(out), PlanRequest(slos=(SloTarget(Metric.TPOT, 95, 100.0),)))
    limit = plan.limits[0]
    assert limit.quality == "capped at max batch"  # c=32, 64 have TPOT far under 100 ms but only queue
    assert plan.max_batch is not None and 14 <= plan.max_batch <= 16


def test_prefill_cost_raises_the_mix_warning(tmp_path: Path) -> None:
    out = sweep(tmp_path, "{prefill_ms_per_token: 0.05}", "2, 8, 16, 32", output_tokens=16, prompt_tokens=400)
    plan = plan_from_results(load(out), PlanRequest())
    assert any("prefill cost is mixed into the slope" in w for w in plan.warnings)
