"""Embeddings and rerank (issue 59 item 4): a batch of inputs in one request, answered whole. The simulator pools
each input as a prefill-only sequence under its step law; a level records request latency, inputs/s and prompt
tokens/s, and a sweep over batch sizes judges and stops each batch size's levels as a series of their own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web
from typer.testing import CliRunner

from loadgen.api import RERANK_QUERY_TOKENS, Api
from loadgen.choices import Transport
from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.errors import ErrorKind
from loadgen.inputs.profile import LoadSpec, Profile, WorkloadSpec
from loadgen.lengths import Lengths
from loadgen.load import Load
from loadgen.quantity import Metric
from loadgen.results import Results, load
from loadgen.run.requests import RequestFactory, Workload
from loadgen.sim.openai_app import SimOptions
from loadgen.wire.client import HttpOptions, make_http_client
from loadgen.wire.pooled import pooled_request
from loadgen.wire.records import RequestRecord
from tests.virtual import run_virtual

runner = CliRunner()
LAW = EngineConfig(base_ms=10.0, per_seq_ms=0.0, prefill_ms_per_token=1.0)  # a batch of B inputs of P: 10 + B*P ms


def test_an_embeddings_body_carries_its_batch_of_distinct_texts_and_streams_nothing() -> None:
    workload = Workload(api=Api.EMBEDDINGS, model="m", prompt_tokens=Lengths(12), batch=4)
    prepared = RequestFactory(workload, seed=0).next()
    body = json.loads(prepared.body)
    assert prepared.inputs == 4 and set(body) == {"model", "input", "encoding_format"}
    assert [len(t.split()) for t in body["input"]] == [12] * 4 and len(set(body["input"])) == 4


def test_a_rerank_body_is_a_query_and_its_documents() -> None:
    workload = Workload(api=Api.RERANK, model="m", prompt_tokens=Lengths(20), batch=3)
    body = json.loads(RequestFactory(workload, seed=0).next().body)
    assert len(body["query"].split()) == RERANK_QUERY_TOKENS
    assert [len(d.split()) for d in body["documents"]] == [20] * 3 and "stream" not in body


def _sweep(api: Api, batches: tuple[int, ...], levels: tuple[float, ...] = (1,), requests: int = 6) -> Results:
    profile = Profile(
        name="pool",
        api=api,
        workload=WorkloadSpec(prompt_tokens=Lengths(100), batch_sizes=batches),
        load=LoadSpec(levels=levels, duration_s=None, requests=requests, warmup_s=0),
    )
    results, _ = run_virtual(profile, SimOptions(engine=LAW))
    return results


def test_the_simulator_pools_every_input_of_a_batch_under_its_step_law() -> None:
    results = _sweep(Api.EMBEDDINGS, (1, 4))
    assert [lv.load.label for lv in results.levels] == ["c=1 b=1", "c=1 b=4"]
    for level, batch in zip(results.levels, (1, 4)):
        # one client: each batch is one step, its inputs prefilled together (10 ms + 1 ms a prompt token)
        assert level.percentile_ms(Metric.E2E, 50) == pytest.approx(10 + 100 * batch, abs=1.5)
        s = level.summary()
        assert s["prompt_tokens_mean"] == 100 and s["inputs_per_request"] == batch
        assert s["inputs_per_s"] == pytest.approx(batch / (0.010 + 0.1 * batch), rel=0.02)
        assert s["prompt_tokens_per_s"] == pytest.approx(100 * s["inputs_per_s"], rel=0.01)
        assert level.histograms[Metric.TTFT].count == 0 and level.empty == 0  # nothing streamed, nothing missing
    assert results.pooling


def test_a_rerank_input_is_the_query_and_a_document() -> None:
    level = _sweep(Api.RERANK, (2,)).levels[0]
    assert level.summary()["prompt_tokens_mean"] == 100 + RERANK_QUERY_TOKENS
    assert level.percentile_ms(Metric.E2E, 50) == pytest.approx(10 + 2 * (100 + RERANK_QUERY_TOKENS), abs=1.5)


def test_a_saturated_batch_size_ends_its_own_series_and_the_next_one_starts(tmp_path: Path) -> None:
    # one slot: at 8 clients the queue and the plateau say saturated, for batch 1 and for batch 4 alike; the sweep
    # stops each batch size's levels there and goes on to the next size
    profile = tmp_path / "e.yaml"
    profile.write_text("target: {sim: {base_ms: 10, per_seq_ms: 0, prefill_ms_per_token: 1, max_num_seqs: 1}}\n"
                       "api: embeddings\nworkload: {prompt_tokens: 50, batch_sizes: [1, 4]}\n"
                       "load: {levels: [1, 8, 16], duration_s: 2, warmup_s: 0.2}\n")  # fmt: skip
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "--quiet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    results = load(out)
    assert [lv.load.label for lv in results.levels] == ["c=1 b=1", "c=8 b=1", "c=1 b=4", "c=8 b=4"]
    stops = [n.split(":")[0] for n in results.notes if n.startswith("stopped after")]
    assert stops == ["stopped after c=8 b=1", "stopped after c=8 b=4"], results.notes
    assert results.complete


def test_a_pooling_results_file_keeps_its_batches_and_inputs(tmp_path: Path) -> None:
    out = tmp_path / "e.json"
    args = ["run", "--url", "sim", "--virtual-time", "--api", "embeddings", "--batch", "8", "--concurrency", "2"]
    result = runner.invoke(app, [*args, "--requests", "10", "--prompt-tokens", "16", "-o", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    level = load(out).levels[0]
    assert level.load == Load(kind="concurrency", value=2, batch=8) and level.inputs == 8 * level.completed
    report = runner.invoke(app, ["report", str(out)])
    assert report.exit_code == 0 and "inputs/s" in report.output and "most inputs/s" in report.output
    plan = runner.invoke(app, ["plan", str(out), "--slo", "e2e_p95<1s"])
    assert plan.exit_code == 2 and "an embeddings run: the planner sizes generation" in plan.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--api", "chat", "--batch", "4"], "--batch batches the inputs of --api embeddings or rerank"),
        (["run", "--api", "embeddings", "--batch", "0"], "--batch: expected a finite number >= 1"),
        (["sweep", "--profile", "embeddings", "--batch-sizes", "1,x"], "--batch-sizes: expected whole numbers"),
        (["sweep", "--profile", "embeddings", "--batch-sizes", "1,9999"], "each from 1 to 4096"),
    ],
)
def test_bad_batch_flags_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    extra = ["--concurrency", "1", "--requests", "2"] if args[0] == "run" else []
    result = runner.invoke(app, [*args, "--url", "sim", "--virtual-time", *extra, "-o", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and message in " ".join(result.stderr.split()), result.output


def test_a_profile_states_its_batch_sizes(tmp_path: Path) -> None:
    profile = tmp_path / "e.yaml"
    profile.write_text("api: embeddings\nworkload: {prompt_tokens: 8, batch_sizes: [2, 4]}\n"
                       "load: {levels: [1], requests: 3, warmup_s: 0}\n")  # fmt: skip
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "--quiet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert [lv.load.batch for lv in load(out).levels] == [2, 4]
    profile.write_text("api: embeddings\nworkload: {batch_sizes: [0]}\n")
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "-o", str(out)])
    assert result.exit_code == 2 and "workload.batch_sizes[0]" in result.stderr


async def _answer_with(handler: Callable[[web.Request], object], transport: Transport) -> RequestRecord:
    """One pooling request of two inputs against a server that answers with ``handler``, over real sockets."""
    app_ = web.Application()

    async def route(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = handler(request)
        assert isinstance(answer, web.StreamResponse)
        return answer

    app_.router.add_post("/v1/embeddings", route)
    runner_ = web.AppRunner(app_, access_log=None)
    await runner_.setup()
    site = web.TCPSite(runner_, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        options = HttpOptions(transport=transport, timeout_s=10.0)
        async with make_http_client(f"http://127.0.0.1:{port}/v1/", {}, options) as http:
            clock = asyncio.get_running_loop().time
            body = b'{"model": "m", "input": ["a b", "c d"]}'
            return await pooled_request(
                http, "embeddings", body, Api.EMBEDDINGS, 2, t_intended=clock(), clock=clock, timeout_s=10.0
            )
    finally:
        await runner_.cleanup()


def _json(obj: object, status: int = 200) -> Callable[[web.Request], object]:
    return lambda _: web.json_response(obj, status=status)


VECTORS = [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": [0.2]}]
TWO = {"data": VECTORS, "usage": {"prompt_tokens": 4}}


@pytest.mark.parametrize("transport", [Transport.NATIVE, Transport.HTTPX, Transport.AIOHTTP])
@pytest.mark.parametrize(
    ("handler", "error", "detail"),
    [
        (_json(TWO), None, None),
        (_json({**TWO, "data": VECTORS[:1]}), ErrorKind.MALFORMED_CHUNK, "answered 1 of the 2 inputs sent"),
        (
            lambda _: web.Response(text="{not json", content_type="application/json"),
            ErrorKind.MALFORMED_CHUNK,
            "answer is not JSON",
        ),
        (lambda _: web.Response(text="<html>", content_type="text/html"), ErrorKind.MALFORMED_CHUNK, "not JSON"),
        (_json({"error": {"message": "input too long"}}, 400), ErrorKind.HTTP_4XX, "HTTP 400: input too long"),
        (_json({"object": "list"}), ErrorKind.MALFORMED_CHUNK, "answer has no data list"),
    ],
)
def test_a_pooling_answer_counts_only_when_it_answers_the_whole_batch(
    transport: Transport, handler: Callable[[web.Request], object], error: ErrorKind | None, detail: str | None
) -> None:
    record = asyncio.run(_answer_with(handler, transport))
    assert record.error is error, record
    assert detail is None or (record.error_detail is not None and detail in record.error_detail), record
    if error is None:
        assert record.inputs == 2 and record.prompt_tokens == 4 and record.output_tokens == 0 and not record.chunk_times


def test_the_gate_compares_a_pooling_runs_latency_and_rate_and_catches_a_slower_server(tmp_path: Path) -> None:
    runs = {}
    for name, prefill in (("base", 1.0), ("slow", 1.15)):  # 15% more prefill per token: each batch is slower
        profile = tmp_path / f"{name}.yaml"
        profile.write_text(f"target: {{sim: {{base_ms: 10, per_seq_ms: 0, prefill_ms_per_token: {prefill}}}}}\n"
                           "api: embeddings\nworkload: {prompt_tokens: 50, batch_sizes: [4]}\n"
                           "load: {levels: [2], requests: 60, warmup_s: 0}\n")  # fmt: skip
        runs[name] = tmp_path / f"{name}.json"
        args = ["sweep", "--profile", str(profile), "--virtual-time", "--quiet", "-o", str(runs[name])]
        assert runner.invoke(app, args).exit_code == 0
    same = runner.invoke(app, ["gate", str(runs["base"]), "--baseline", str(runs["base"])])
    assert same.exit_code == 0, same.output
    assert "e2e_p50" in same.output and "ttft_p95" not in same.output  # no token stream: nothing of one compared
    slower = runner.invoke(app, ["gate", str(runs["slow"]), "--baseline", str(runs["base"])])
    assert slower.exit_code == 1 and "e2e_p95" in slower.output, slower.output
