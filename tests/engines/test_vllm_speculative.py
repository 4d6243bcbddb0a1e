"""Issue 58 item 6 on a real engine: vLLM's CPU build with n-gram speculative decoding (prompt lookup, 3 draft
tokens). Its /metrics counts the drafts it verified and accepted; the run reads those counters over the
window and says the acceptance rate, and the tokens it streams are counted exactly, however many an event.

The tiny model's random weights seldom repeat their prompt, so few drafts are accepted (about 1-2%) and an
event carries about one token: what is checked is that the counters are read and said, and that the token
count holds; a high acceptance and its several tokens an event are checked on the simulator
(``tests/sim/test_speculative.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load
from planner.reports.report import caveats
from tests.engines.vllm_cpu import VllmCpuServer, required_engine_python

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]  # its own server's start-up: about two minutes
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'
PER_CHUNK_USAGE = '{"ignore_eos": true, "stream_options": {"continuous_usage_stats": true}}'


@pytest.fixture(scope="module")
def speculative(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmCpuServer]:
    python = required_engine_python()
    args = ("--speculative-config", NGRAM, "--enforce-eager")  # no compile: start-up is most of its cost
    with VllmCpuServer(python, tmp_path_factory.mktemp("vllm-spec"), extra_args=args) as server:
        yield server


def test_the_acceptance_rate_of_vllms_drafts_is_read_off_its_counters(
    speculative: VllmCpuServer, tmp_path: Path
) -> None:
    out = tmp_path / "spec.json"
    args = ["run", "--url", speculative.base_url, "--api", "chat", "--concurrency", "2", "--requests", "24"]
    args += ["--max-tokens", "64", "--extra-body", PER_CHUNK_USAGE, "-o", str(out), "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n--- vLLM log ---\n{speculative.tail()}"
    results = load(out)
    level = results.levels[0]
    assert level.failed == 0 and level.output_tokens == 64 * level.completed and not level.tokens_estimated
    assert level.server is not None and level.server.source == "vllm"
    assert level.server.spec_draft_tokens and level.server.spec_draft_tokens > 0
    acceptance = level.server.spec_acceptance
    assert acceptance is not None and 0.0 <= acceptance <= 1.0
    assert level.usage_per_chunk == level.completed  # every chunk said its tokens: ITL is per token
    said = " ".join(caveats(results))
    assert "of its draft tokens" in said, said
