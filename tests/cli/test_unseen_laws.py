"""Three simulator laws no other test uses, each with prefill, KV, attention and token-budget terms: calibrated
at three prompt lengths, a mix plan predicts TTFT at a longer prompt within 10% of the simulator's sweep there,
and its max batch and replicas are never optimistic on the true law."""

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
from loadgen.results import Results, save_atomic
from loadgen.sim.openai_app import SimOptions
from loadgen.slo_target import SloTarget
from planner.capacity.sizing import Traffic, simulate_replicas
from planner.laws.lengthsample import LengthSample
from planner.simulation.closed_loop import run_closed_loop
from tests.virtual import run_virtual

runner = CliRunner()
OUTPUT = 64
ASKED = 1536  # the prompt planned for: twice the longest calibrated
LAWS = {
    "fast-prefill": EngineConfig(
        base_ms=9.0,
        per_seq_ms=0.22,
        per_kv_ms=0.5,
        prefill_ms_per_token=0.015,
        prefill_attention_ms=4.0,
        max_num_seqs=64,
        max_num_batched_tokens=1024,
        kv_capacity_tokens=200_000,
    ),
    "slow-kv": EngineConfig(
        base_ms=18.0,
        per_seq_ms=0.4,
        per_kv_ms=1.6,
        prefill_ms_per_token=0.03,
        prefill_attention_ms=10.0,
        max_num_seqs=64,
        max_num_batched_tokens=768,
        kv_capacity_tokens=120_000,
    ),
    "tight-budget": EngineConfig(
        base_ms=11.0,
        per_seq_ms=0.3,
        per_kv_ms=0.9,
        prefill_ms_per_token=0.05,
        prefill_attention_ms=20.0,
        max_num_seqs=64,
        max_num_batched_tokens=384,
        kv_capacity_tokens=90_000,
    ),
}
TPOT_SLO, TTFT_SLO = (
    SloTarget(metric=Metric.TPOT, percentile=95, limit=45.0),
    SloTarget(metric=Metric.TTFT, percentile=95, limit=1500.0),
)


def _sweep(law: EngineConfig, prompt: int, levels: list[int], seed: int) -> Results:
    profile = {
        "schema_version": 1,
        "name": f"p{prompt}",
        "target": "sim",
        "api": "completions",
        "workload": {"prompt_tokens": prompt, "output_tokens": OUTPUT},
        "load": {"mode": "closed", "levels": levels, "duration_s": 10, "warmup_s": 2},
        "seed": seed,
    }
    return run_virtual(parse_profile(profile, "test"), sim=SimOptions(engine=law))[0]


def _true_max_batch(law: EngineConfig) -> int:
    """The largest closed-loop concurrency whose TPOT p95 on the true law meets the SLO (batch = clients)."""
    lengths = LengthSample.fixed(ASKED, OUTPUT)
    best = 0
    for c in range(1, law.max_num_seqs + 1):
        tpot = run_closed_loop(law, c, lengths).tpot_ms_at(95.0)
        if tpot is None or tpot > TPOT_SLO.limit:
            break
        best = c
    return best


@pytest.mark.parametrize("name", sorted(LAWS))
def test_an_unseen_law_is_predicted_at_a_longer_prompt_and_sized_on_the_safe_side(name: str, tmp_path: Path) -> None:
    law = LAWS[name]
    files = []
    for prompt in (128, 384, 768):
        save_atomic(_sweep(law, prompt, [1, 4, 16, 32], seed=3), path := tmp_path / f"p{prompt}.json")
        files.append(str(path))
    args = ["plan", *files, "--prompt-tokens", str(ASKED), "--output-tokens", str(OUTPUT), "--qps", "6"]
    args += ["--slo", "tpot_p95<45ms", "--slo", "ttft_p95<1500ms", "--predict-levels", "1,4,8", "--json"]
    args += ["--max-num-batched-tokens", str(law.max_num_batched_tokens)]  # the server's, as its operator knows it
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    predicted = {p["concurrency"]: p for p in plan["predicted_levels"]}
    for level in _sweep(law, ASKED, [1, 4, 8], seed=9).levels:
        p = predicted[round(level.load.value)]
        for q in (50, 95):
            measured = level.percentile_ms(Metric.TTFT, q)
            assert p[f"ttft_p{q}_ms"] == pytest.approx(measured, rel=0.10), (name, level.load.value, q)
    batch, replicas, budget = plan["max_batch"], plan["replicas"], plan["mix"]["max_num_batched_tokens"]
    assert 1 <= batch <= _true_max_batch(law), name
    # at the recommended budget (the server's own where none is recommended)
    served = law.capped(batch)
    if budget is not None:
        served = dataclasses.replace(served, max_num_batched_tokens=max(budget, batch))
    outcome = simulate_replicas(
        served, replicas, 6.0, (TPOT_SLO, TTFT_SLO), Traffic(output_tokens=OUTPUT, prompt_tokens=ASKED)
    )
    assert outcome.passed, (name, replicas, budget, outcome.estimates)
