"""A mix plan for long prompts on a chunking server: the sizing simulation runs the server's token budget,
and the budget it recommends meets every SLO on the true law at the replicas it recommends."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.quantity import Metric
from loadgen.results import save_atomic
from loadgen.sim.openai_app import SimOptions
from loadgen.slo_target import SloTarget
from planner.capacity.sizing import Traffic, simulate_replicas
from tests.virtual import run_virtual

runner = CliRunner()
# issue 54's case: prefill, KV and a budget of 512 tokens a step; calibrated at prompts 128 and 512, asked 2,048
LAW = EngineConfig(
    base_ms=12,
    per_seq_ms=0.35,
    per_kv_ms=0.9,
    prefill_ms_per_token=0.04,
    max_num_seqs=128,
    max_num_batched_tokens=512,
    kv_capacity_tokens=60_000,
)
SLOS = (
    SloTarget(metric=Metric.TPOT, percentile=95, limit=60.0),
    SloTarget(metric=Metric.TTFT, percentile=95, limit=1500.0),
)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("chunked")
    paths = []
    for prompt in (128, 512):
        profile = {
            "schema_version": 1,
            "name": f"A-{prompt}",
            "target": "sim",
            "api": "completions",
            "workload": {"prompt_tokens": prompt, "output_tokens": 128},
            "load": {"mode": "closed", "levels": [1, 8, 32, 64], "duration_s": 20, "warmup_s": 4},
            "seed": 5,
        }
        results, _ = run_virtual(parse_profile(profile, "test"), sim=SimOptions(engine=LAW))
        save_atomic(results, folder / f"A-{prompt}.json")
        paths.append(folder / f"A-{prompt}.json")
    return paths


def test_long_prompts_on_a_chunking_server_get_the_replicas_and_budget_the_true_law_needs(
    calibration: list[Path],
) -> None:
    args = ["plan", *map(str, calibration), "--prompt-tokens", "2048", "--output-tokens", "128", "--qps", "10"]
    limits = ["--slo", "tpot_p95<60ms", "--slo", "ttft_p95<1500ms"]
    server = ["--max-num-batched-tokens", "512", "--kv-capacity-tokens", "60000"]
    result = runner.invoke(app, [*args, *limits, *server, "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    replicas, budget, batch = plan["replicas"], plan["mix"]["max_num_batched_tokens"], plan["max_batch"]
    assert "512 tokens a step (chunked prefill)" in plan["replicas_method"]  # the server's budget, as given
    true_law = dataclasses.replace(LAW.capped(batch), max_num_batched_tokens=budget)
    traffic = Traffic(output_tokens=128, prompt_tokens=2048, seed=11)
    # the one-step prefill the simulation used to run said 6; on the true law 6 fail and the count holds
    assert replicas >= 7
    assert simulate_replicas(true_law, replicas, 10.0, SLOS, traffic).passed
    assert not simulate_replicas(
        dataclasses.replace(LAW.capped(batch), max_num_batched_tokens=512), 6, 10.0, SLOS, traffic
    ).passed
    # the per-step TPOT bound alone (87 tokens) would starve long prompts: TTFT p95 of seconds at these replicas
    assert budget > 150
    starved = simulate_replicas(
        dataclasses.replace(LAW.capped(batch), max_num_batched_tokens=87), replicas, 10.0, SLOS, traffic
    )
    assert not starved.passed
