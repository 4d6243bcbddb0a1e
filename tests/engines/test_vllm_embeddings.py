"""Issue 59 item 4 on a real engine: vLLM's CPU build serving the tiny model as an embedding model (``--runner
pooling --convert embed``). A sweep over batch sizes reads each batch whole from /v1/embeddings (the inputs
vLLM answered, its usage's prompt tokens sized to the length asked) and /v1/rerank answers a query's documents;
vLLM scores them with the embedding model (a bi-encoder: its usage counts the query once a request)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.quantity import Metric
from loadgen.results import load
from planner.reports.report import caveats
from tests.engines.vllm_cpu import VllmCpuServer, required_engine_python

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]  # its own server's start-up: one to two minutes
runner = CliRunner()


@pytest.fixture(scope="module")
def pooling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmCpuServer]:
    python = required_engine_python()
    args = ("--runner", "pooling", "--convert", "embed", "--enforce-eager")  # no compile: 10 s less start-up
    with VllmCpuServer(python, tmp_path_factory.mktemp("vllm-embed"), extra_args=args) as server:
        yield server


def test_an_embeddings_sweep_over_batch_sizes_reads_what_vllm_answered(pooling: VllmCpuServer, tmp_path: Path) -> None:
    profile = tmp_path / "embed.yaml"
    profile.write_text(f"target: {pooling.base_url}\napi: embeddings\n"
                       "workload: {prompt_tokens: 128, batch_sizes: [1, 8]}\n"
                       "load: {levels: [1, 2], requests: 24, warmup_s: 0}\n")  # fmt: skip
    out = tmp_path / "embed.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--no-stop", "--quiet", "-o", str(out)])
    assert result.exit_code == 0, f"{result.output}\n--- vLLM log ---\n{pooling.tail()}"
    results = load(out)
    assert [lv.load.label for lv in results.levels] == ["c=1 b=1", "c=2 b=1", "c=1 b=8", "c=2 b=8"]
    for level in results.levels:
        batch = level.load.batch or 0
        assert level.failed == 0 and level.inputs == batch * level.completed
        s = level.summary()
        assert s["prompt_tokens_mean"] == pytest.approx(128, rel=0.05)  # sized by the engine's own tokenizer
        assert s["inputs_per_s"] == pytest.approx(batch * s["requests_per_s"], rel=1e-3)
    one, eight = (results.levels[i].percentile_ms(Metric.E2E, 50) or 0.0 for i in (0, 2))
    assert eight > one  # eight inputs a request take longer than one
    report = runner.invoke(app, ["report", str(out)])
    assert report.exit_code == 0 and "most inputs/s" in report.output


def test_a_rerank_batch_is_answered_document_by_document(pooling: VllmCpuServer, tmp_path: Path) -> None:
    out = tmp_path / "rerank.json"
    args = ["run", "--url", pooling.base_url, "--api", "rerank", "--batch", "4", "--concurrency", "2"]
    result = runner.invoke(app, [*args, "--requests", "20", "--prompt-tokens", "64", "-o", str(out), "--quiet"])
    assert result.exit_code == 0, f"{result.output}\n--- vLLM log ---\n{pooling.tail()}"
    results = load(out)
    level = results.levels[0]
    assert level.failed == 0 and level.inputs == 4 * level.completed
    assert not [c for c in caveats(results) if "prompts averaged" in c], caveats(results)
