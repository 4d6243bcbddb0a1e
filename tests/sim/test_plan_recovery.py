"""The planner recovers the simulator's known law from sweeps over loopback sockets.

In virtual time (``--virtual-time``): these test the planner's logic on what a
sweep measures, so the generator's own noise is kept out; the real-time
accuracy of the measurement is tested in ``test_run_against_sim.py`` and by the
README's main job in ``test_sweep_against_sim.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.quantity import Metric
from loadgen.results import load
from loadgen.slo_target import SloTarget
from planner import PlanRequest, plan_from_results

runner = CliRunner()


def sweep(
    tmp_path: Path, sim: str, levels: str, output_tokens: int = 16, prompt_tokens: int = 8, duration_s: float = 2
) -> Path:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"target: {{sim: {sim}}}\napi: completions\n"
        f"workload: {{output_tokens: {output_tokens}, prompt_tokens: {prompt_tokens}}}\n"
        f"load: {{levels: [{levels}], duration_s: {duration_s}, warmup_s: 0.5}}\nstop: {{stop_on_saturation: false}}\n"
    )
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "-o", str(out), "--quiet", "--virtual-time"])
    assert result.exit_code == 0, result.output
    return out


def test_law_and_max_batch_are_recovered(tmp_path: Path) -> None:
    out = sweep(tmp_path, "{max_num_seqs: 64}", "1, 4, 16, 32, 64, 96, 128")
    plan = plan_from_results(load(out), PlanRequest(slos=(SloTarget(metric=Metric.TPOT, percentile=95, limit=40.0),)))
    assert plan.fit is not None
    assert plan.fit.base_ms == pytest.approx(25.0, rel=0.01)
    assert plan.fit.per_seq_ms == pytest.approx(0.4, rel=0.02)
    assert plan.saturation is not None and plan.saturation.max_batch == 64
    states = dict(zip([lv.label for lv in plan.observations.levels], plan.saturation.states))  # type: ignore[union-attr]
    assert states["c=96"] == states["c=128"] == "saturated"
    assert states["c=1"] == states["c=16"] == "unsaturated"
    # 40 ms allows 37 by the law (25 + 0.4 * 37 = 39.8): the model and the measured levels agree, and
    # the decision is never above either nor above B (saturated levels are never compliant)
    limit = plan.limits[0]
    assert limit.model_batch == limit.measured_batch == plan.max_batch == 37


def test_every_level_under_the_slo_is_capped_by_the_max_batch(tmp_path: Path) -> None:
    out = sweep(tmp_path, "{max_num_seqs: 16}", "4, 8, 16, 32, 64")
    plan = plan_from_results(load(out), PlanRequest(slos=(SloTarget(metric=Metric.TPOT, percentile=95, limit=100.0),)))
    limit = plan.limits[0]
    assert limit.quality == "capped at max batch"  # c=32, 64 have TPOT far under 100 ms but only queue
    assert plan.max_batch is not None and 14 <= plan.max_batch <= 16


def test_prefill_cost_raises_the_mix_warning(tmp_path: Path) -> None:
    # 4 s: the upper levels' requests live ~1 s, and each client's first (ramp) request is not timed
    out = sweep(tmp_path, "{prefill_ms_per_token: 0.05}", "2, 8, 16, 32", 16, prompt_tokens=400, duration_s=4)
    plan = plan_from_results(load(out), PlanRequest())
    assert any("prefill cost is mixed into the slope" in w for w in plan.warnings)
