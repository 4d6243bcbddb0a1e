"""Issue 58: a speculative-decoding server sends several tokens an event. The simulator verifies draft tokens
per decode step (the law charged once per verified step); the generator counts the tokens exactly from
usage, times ITL per event, or per token where each chunk says its tokens, and the report says which, with
the step per event and the acceptance rate from the server's counters."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.engine import Engine, EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.quantity import Metric
from loadgen.results import Results
from loadgen.sim.openai_app import SimOptions
from planner.reports.report import caveats
from tests.virtual import run_virtual

PER_CHUNK_USAGE = {"stream_options": {"continuous_usage_stats": True}}


def _sweep(law: EngineConfig, extra_body: dict[str, Any]) -> Results:
    profile = {
        "schema_version": 1,
        "name": "speculative",
        "target": "sim",
        "api": "chat",
        "workload": {"prompt_tokens": 32, "output_tokens": 33},
        "load": {"mode": "closed", "levels": [4], "duration_s": 10, "warmup_s": 1},
        "extra_body": extra_body,
        "seed": 1,
    }
    return run_virtual(parse_profile(profile, "test"), sim=SimOptions(engine=law))[0]


@pytest.mark.parametrize(("extra_body", "itl_ms", "per"), [({}, 20.0, "event"), (PER_CHUNK_USAGE, 5.0, "token")])
def test_four_tokens_an_event_every_20_ms(extra_body: dict[str, Any], itl_ms: float, per: str) -> None:
    # every draft accepted: the first token alone (sampled after prefill), then 1 + 3 a step of 20 ms
    law = EngineConfig(base_ms=20.0, per_seq_ms=0.0, spec_draft_tokens=3, spec_acceptance=1.0)
    results = _sweep(law, extra_body)
    level = results.levels[0]
    assert level.output_tokens == 33 * level.completed and not level.tokens_estimated
    assert level.percentile_ms(Metric.ITL, 50) == pytest.approx(itl_ms, rel=0.02)
    assert level.mean_ms(Metric.TPOT) == pytest.approx(5.0, rel=0.02)
    assert level.tokens_per_event == pytest.approx(33 / 9)
    summary = level.summary()
    assert summary["itl_per"] == per and summary["tokens_per_event"] == pytest.approx(3.667, abs=0.001)
    assert level.server is not None and level.server.spec_acceptance == pytest.approx(1.0)
    note = next(c for c in caveats(results) if "tokens an event" in c)
    assert f"ITL is per {per}" in note and "a step that verifies them takes about 18.3 ms" in note
    assert "the server accepted 100% of its draft tokens" in note


def test_each_draft_is_accepted_until_the_first_rejection() -> None:
    # acceptance 0.5 of 3 drafts: 1 + 0.5 + 0.25 + 0.125 = 1.875 tokens a verified step, on average
    engine = Engine(config=EngineConfig(base_ms=10.0, per_seq_ms=0.0, spec_draft_tokens=3, spec_acceptance=0.5, seed=7))
    for seq in range(200):
        engine.submit(seq, prompt_tokens=8, max_tokens=1000, now_ms=0.0)
    now, tokens, steps = 0.0, 0, 0
    for _ in range(60):
        step = engine.next_step(now)
        assert step is not None
        now = step.end_ms
        if steps:  # the first step samples each sequence's first token alone
            tokens += sum(step.counts)
        steps += 1
    assert step is not None and tokens / (len(step.emitted) * (steps - 1)) == pytest.approx(1.875, rel=0.03)
    accepted = engine.counters.spec_accepted_tokens / engine.counters.spec_draft_tokens
    assert accepted == pytest.approx(0.875 / 3, rel=0.03)  # the share of drafts accepted, as vLLM counts it
