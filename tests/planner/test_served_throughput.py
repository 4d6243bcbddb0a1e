"""One replica's tokens a second at the plan's batch: a slot that waits and prefills emits nothing, so where
prefill costs time the per-step count (batch tokens a step) reads high; the plan serves Little's-law rate."""

from __future__ import annotations

from loadgen.engine import EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.sim.openai_app import SimOptions
from planner.capacity.replica_count import served_tokens_per_s
from planner.laws.lengthsample import LengthSample
from planner.laws.stepmodel import StepModel
from tests.virtual import run_virtual

# long prompts, short answers: each 1,024-token prompt costs 51 ms of prefill in 512-token chunks, beside
# steps of 12 ms at batch 8 (vLLM's CPU build read its per-step count 21% high at this mix)
ENGINE = EngineConfig(
    base_ms=10.0, per_seq_ms=0.3, prefill_ms_per_token=0.05, max_num_seqs=8, max_num_batched_tokens=512
)
PROMPT, OUTPUT, BATCH = 1024, 64, 8


def _measured_tokens_per_s() -> float:
    profile = {
        "schema_version": 1,
        "name": "long-prompt",
        "target": "sim",
        "api": "completions",
        "workload": {"prompt_tokens": PROMPT, "output_tokens": OUTPUT},
        "load": {"mode": "closed", "levels": [BATCH], "duration_s": 20, "warmup_s": 3},
    }
    level = run_virtual(parse_profile(profile, "test"), sim=SimOptions(engine=ENGINE))[0].levels[0]
    assert level.output_tokens_per_s is not None
    return level.output_tokens_per_s


def test_a_replica_that_prefills_serves_its_clients_rate_not_a_token_per_slot_a_step() -> None:
    decode = StepModel.given(ENGINE.base_ms, ENGINE.per_seq_ms)
    served = float(served_tokens_per_s(decode, ENGINE, BATCH, LengthSample.fixed(PROMPT, OUTPUT)))
    measured = _measured_tokens_per_s()
    assert float(decode.tokens_per_s_exact(BATCH)) > 1.3 * measured  # the per-step count: far too high
    assert abs(served / measured - 1) < 0.03, (served, measured)


def test_an_engine_without_prefill_cost_keeps_the_laws_exact_decimals() -> None:
    law = StepModel.given(25.0, 0.4)
    free = EngineConfig(base_ms=25.0, per_seq_ms=0.4)
    assert served_tokens_per_s(law, free, 87, LengthSample.fixed(64, 200)) == law.tokens_per_s_exact(87)
