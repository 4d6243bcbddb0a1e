"""Servers that break HTTP or SSE: every case ends as a named, counted failure of that request."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import orjson
import pytest

from loadgen.api import Api
from loadgen.choices import Transport
from loadgen.errors import ErrorKind
from loadgen.quantity import Metric
from loadgen.run_settings import RunSettings
from loadgen.wire import native
from loadgen.wire.client import HttpOptions, make_http_client, stream_request
from loadgen.wire.records import RequestRecord
from loadgen.wire.sse import SSEDecoder, SSEError
from tests.faults.rawserver import SSE_HEAD, Reply, chunked, keep_alive_server, raw_server, sends

BODY = b'{"model": "m", "prompt": "hi", "max_tokens": 4, "stream": true}'


async def one_request(reply: Reply, transport: str = "aiohttp", **kwargs: int) -> RequestRecord:
    async with raw_server(reply) as url:
        return await post(url + "/", transport, **kwargs)


async def post_on(http: Any) -> RequestRecord:
    """One streamed completion on an open client."""
    return await stream_request(
        http, "completions", BODY, Api.COMPLETIONS, t_intended=time.monotonic(), clock=time.monotonic, timeout_s=5
    )


async def post(base_url: str, transport: str = "aiohttp", **kwargs: int) -> RequestRecord:
    """One streamed completion to ``base_url``."""
    async with make_http_client(base_url, {}, HttpOptions(timeout_s=10, transport=transport)) as http:  # type: ignore[arg-type]
        return await stream_request(http, "completions", BODY, Api.COMPLETIONS, t_intended=time.monotonic(),
                                    clock=time.monotonic, timeout_s=10, **kwargs)  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 2OO OK\r\ncontent-length: 0\r\n\r\n",  # a bad status line
        b"NOT HTTP AT ALL\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n",  # a header past every parser's limit
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nZZ\r\nxx\r\n",  # broken chunked framing
        SSE_HEAD + chunked(b'data: {"choices":[{"text":"a"}]}\n\n') + b"zz\r\nabc\r\n",  # ... mid-stream
        SSE_HEAD + chunked(b'data: {"choices":[{"text":"a"}]}\n\n') + b"3\r\nabcdef\r\n0\r\n\r\n",  # too long
    ],
    ids=["status-line", "not-http", "huge-header", "bad-chunk-size", "bad-chunk-mid-stream", "chunk-too-long"],
)
async def test_protocol_errors_are_a_named_failure_not_an_exception(response: bytes, transport: str) -> None:
    # issue 31 item 14: broken chunk framing mid-stream was stream_broken on two transports (README: protocol)
    record = await one_request(sends(response), transport)
    assert record.error == ErrorKind.PROTOCOL, record
    assert record.error_detail is not None and "127.0.0.1" not in record.error_detail


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\ncontent-type: text/event-stream\ntransfer-encoding: chunked\n\n",  # bare LF
        b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 9_216 + b"\r\n" + SSE_HEAD.split(b"\r\n", 1)[1],  # a 9 KiB header
    ],
    ids=["bare-lf", "9kib-header"],
)
async def test_answers_every_transport_reads_alike(head: bytes, transport: str) -> None:
    """Issue 31 item 14: bare-LF lines were refused by the native wire only (RFC 9112 lets a recipient
    accept them; aiohttp and httpx do); aiohttp alone refused a 9 KiB header (its own limit is 8 KiB)."""
    body = chunked(b'data: {"choices":[{"text":"a"}]}\n\n') + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    record = await one_request(sends(head + body), transport)
    assert record.error is None and record.output_tokens == 1, record


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_a_never_ending_event_fails_the_request_as_malformed_with_a_bounded_buffer(transport: str) -> None:
    async def endless(writer: asyncio.StreamWriter) -> None:
        writer.write(SSE_HEAD)
        line = b"data: " + b"x" * 1000 + b"\n"  # data lines, never the blank line that ends the event
        for _ in range(5_000):
            writer.write(chunked(line * 10))
            await writer.drain()

    record = await one_request(endless, transport, max_event_chars=200_000)
    assert record.error == ErrorKind.MALFORMED_CHUNK and "exceeds 200,000 characters" in (record.error_detail or "")


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", [*Transport, "native-pure"])
@pytest.mark.parametrize(
    ("api", "event"),
    [
        (Api.COMPLETIONS, b'data: {"id":"c","choices":[{"index":0,"text":"a"}]}\n\n'),  # the compiled reader's own
        (Api.CHAT, b'data: {"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}\n\n'),
    ],
    ids=["plain-tokens", "reasoning-deltas"],
)
async def test_an_endless_stream_ends_at_its_event_cap_not_its_timeout(
    api: Api, event: bytes, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 70 S14: events far past ``max_tokens`` were taken until ``--timeout`` (about 400 MB a stream at
    the default 600 s); now a stream past 2 x max_tokens + 64 token events is a named failure at once."""
    if transport == "native-pure":
        monkeypatch.setattr(native, "FASTREAD", None)
    sent = 0

    async def endless(writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        writer.write(SSE_HEAD)
        for _ in range(20_000):  # bounded, so a failing client cannot hang the test: 2 million events
            writer.write(chunked(event) * 100)
            sent += 100
            await writer.drain()

    body = orjson.dumps({"model": "m", api.prompt_field: "hi", "max_tokens": 4, "stream": True})
    started = time.monotonic()
    async with raw_server(endless) as url:
        options = HttpOptions(timeout_s=10, transport=transport.removesuffix("-pure"))  # type: ignore[arg-type]
        async with make_http_client(url + "/", {}, options) as http:
            record = await stream_request(http, api.path, body, api, t_intended=time.monotonic(),
                                          clock=time.monotonic, timeout_s=10, max_tokens=4)  # fmt: skip
    assert record.error == ErrorKind.MALFORMED_CHUNK, record.error_detail
    assert "over 72 token events where max_tokens was 4" in (record.error_detail or "")
    assert len(record.chunk_times) == 73 and sent < 1_000_000 and time.monotonic() - started < 8


def test_the_decoder_holds_at_most_its_limit_between_feeds() -> None:
    decoder = SSEDecoder(max_event_chars=50_000)
    held = []
    with pytest.raises(SSEError):
        for _ in range(10_000):
            decoder.feed(b"data: " + b"y" * 500 + b"\n")
            held.append(decoder.buffered_chars)
    assert max(held) <= 50_000 and len(held) < 200
    line = SSEDecoder(max_event_chars=50_000)
    with pytest.raises(SSEError, match="line exceeds"):
        for _ in range(10_000):
            line.feed(b"z" * 4096)  # one endless line: no newline ever


SSE_OK = (
    SSE_HEAD + chunked(b'data: {"choices":[{"text":"a","finish_reason":"length"}]}\n\ndata: [DONE]\n\n') + b"0\r\n\r\n"
)


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_url_credentials_become_basic_auth_and_the_query_rides_on_every_path(transport: str) -> None:
    heads: list[bytes] = []
    async with raw_server(sends(SSE_OK), heads) as url:
        base = url.replace("http://", "http://ann:s3cret-pw@") + "?api-version=2024-06-01"
        record = await post(base_url_of(base), transport)
    assert record.error is None, record
    request_line, *headers = heads[0].decode().split("\r\n")
    assert request_line.startswith("POST /v1/completions?api-version=2024-06-01 HTTP/1.1")
    sent = {name.lower(): value for name, _, value in (h.partition(": ") for h in headers if h)}
    assert sent["authorization"] == "Basic " + base64.b64encode(b"ann:s3cret-pw").decode()


def base_url_of(url: str) -> str:
    from loadgen.wire.target import normalize_base_url

    return normalize_base_url(url)


def test_stored_urls_hide_credentials_and_query_values() -> None:
    from loadgen.wire.target import redact_url, url_secrets

    url = "https://ann:s3cret-pw@gw.example/openai/v1?api-version=2024-06-01&key=k-123456"
    assert redact_url(url) == "https://gw.example/openai/v1?api-version=<redacted>&key=<redacted>"
    assert {"s3cret-pw", "k-123456", "2024-06-01"} <= set(url_secrets(url))


def test_url_credentials_and_an_api_key_together_are_refused() -> None:
    from loadgen.errors import UsageError

    with pytest.raises(UsageError, match="credentials in the URL and an API key"):
        make_http_client("http://a:b@127.0.0.1:9/v1/", {"Authorization": "Bearer k"}, HttpOptions())


def test_a_server_echoing_the_key_never_gets_it_into_the_records(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from loadgen.run.requests import Workload
    from loadgen.run.session import Session
    from loadgen.wire.records import RecordsWriter

    session = Session(
        base_url="http://ann:pw-9876@127.0.0.1:9/v1/?key=q-55555",
        workload=Workload(api=Api.CHAT, model="m"),
        levels=(),
        api_key="sk-live-123456",
        headers={"X-Token": "tok-abcdef"},
    )
    echo = "server error in stream: Incorrect API key provided: sk-live-123456 (token tok-abcdef, q-55555, pw-9876)"
    record = RequestRecord(
        t_intended=0.0,
        t_slot=None,
        t_sent=0.0,
        t_first=None,
        t_last=None,
        t_done=1.0,
        chunk_times=(),
        chunk_tokens=None,
        output_tokens=None,
        output_tokens_estimated=True,
        prompt_tokens=None,
        error=ErrorKind.STREAM_BROKEN,
        http_status=200,
        error_detail=echo,
    )
    path = tmp_path / "records.jsonl"
    writer = RecordsWriter(path, session.secrets)
    writer.write(record)
    writer.close()
    text = path.read_text()
    assert "Incorrect API key provided" in text
    for secret in ("sk-live-123456", "tok-abcdef", "q-55555", "pw-9876"):
        assert secret not in text


def test_a_tls_verification_failure_is_named_as_such() -> None:
    import ssl

    import httpx

    from loadgen.wire.target import tls_failure

    cause = ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed certificate")
    cause.verify_message = "self-signed certificate"
    try:
        try:
            raise cause
        except ssl.SSLError as inner:
            raise httpx.ConnectError("boom") from inner
    except httpx.ConnectError as outer:
        assert tls_failure(outer) == "self-signed certificate"
    assert tls_failure(httpx.ConnectError("refused")) is None


MODELS_ANSWER = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 22\r\n\r\n{"data":[{"id":"m"}]}'


async def _models_error(url: str, transport: str) -> str:
    from loadgen.errors import EndpointError
    from loadgen.wire.target import resolve_model

    async with make_http_client(url + "/", {}, HttpOptions(timeout_s=5, transport=transport)) as http:  # type: ignore[arg-type]
        with pytest.raises(EndpointError) as failure:
            await resolve_model(http, url, None)
    return str(failure.value)


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_a_certificate_for_another_name_is_not_answered_with_insecure_for_self_signed(
    transport: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Issue 31, item 18: a hostname mismatch ended 'for a self-signed certificate pass --insecure'."""
    import ssl

    import trustme

    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("example.org").configure_cert(server)  # trusted, but not for 127.0.0.1
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    async with raw_server(sends(MODELS_ANSWER), ssl=server) as url:
        message = await _models_error(url, transport)
    assert "not valid for '127.0.0.1'" in message and "use the host name the certificate was issued for" in message
    assert "self-signed" not in message


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_https_to_a_plain_http_port_says_so_in_seconds(transport: str) -> None:
    """Issue 31, item 18: https:// to a plain-HTTP port waited 30 s, then advised --insecure."""
    started = time.monotonic()
    async with raw_server(sends(MODELS_ANSWER)) as url:
        message = await _models_error(url.replace("http://", "https://"), transport)
    assert "no TLS handshake within 10 s: if that port serves plain HTTP, use an http:// URL" in message, message
    assert time.monotonic() - started < 20


@pytest.mark.asyncio
async def test_closed_loop_clients_back_off_from_a_dead_target() -> None:
    import socket

    from loadgen.load import LevelPlan, Load
    from loadgen.run.requests import Workload
    from loadgen.run.runner import run_level

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan = LevelPlan(load=Load(kind="concurrency", value=4), duration_s=1.5)
    async with make_http_client(f"http://127.0.0.1:{port}/v1/", {}, HttpOptions(timeout_s=5)) as http:
        result = await run_level(plan, Workload(api=Api.COMPLETIONS, model="m"), http)
    connects = result.errors.get(ErrorKind.CONNECT, 0)
    assert 4 <= connects <= 4 * 8  # 50 ms doubling to 1 s: a handful per client, not thousands


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_an_html_page_with_status_200_is_a_malformed_answer(transport: str) -> None:
    page = b"<html><body>gateway says hi</body></html>"
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n%s" % (len(page), page)
    record = await one_request(sends(reply), transport)
    assert record.error == ErrorKind.MALFORMED_CHUNK and "text/html" in (record.error_detail or "")


@pytest.mark.asyncio
async def test_a_stream_with_no_output_token_is_counted_and_said() -> None:
    from loadgen.load import Load
    from loadgen.results import Results, RunInfo, Target
    from loadgen.run.metrics import LevelRecorder
    from planner.reports.report import caveats

    empty = SSE_HEAD + chunked(b'data: {"choices":[{"text":null,"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
    record = await one_request(sends(empty + b"0\r\n\r\n"))
    assert record.error is None and record.t_first is None
    recorder = LevelRecorder(Load(kind="concurrency", value=1), window_start=0.0)
    recorder.add(record)
    level = recorder.finish(record.t_done + 1)
    assert level.completed == 1 and level.empty == 1 and level.histograms[Metric.TTFT].count == 0
    results = Results(
        run=RunInfo(id="r", started_at="t", tool_version="0", python="3", platform="L", cpu_count=1, command="run"),
        target=Target("u", "m", "completions"),
        settings=RunSettings(),
        levels=(level,),
        complete=True,
    )
    assert any("without streaming any output token" in c for c in caveats(results))


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_an_answer_the_server_counts_as_zero_tokens_is_empty_not_timed(transport: str) -> None:
    """Issue 31, item 15: usage 0 with one empty delta counted as completed with a TTFT and one token of
    throughput (``output_tokens or len(times)`` read 0 as missing): 291.6 tok/s from 0-token answers."""
    from loadgen.load import Load
    from loadgen.run.metrics import LevelRecorder

    zero = SSE_HEAD + chunked(
        b'data: {"choices":[{"text":""}]}\n\n'
        b'data: {"choices":[{"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":0}}\n\n'
        b"data: [DONE]\n\n"
    )
    record = await one_request(sends(zero + b"0\r\n\r\n"), transport)
    assert record.error is None and record.output_tokens == 0, record
    recorder = LevelRecorder(Load(kind="concurrency", value=1), window_start=0.0)
    recorder.add(record)
    level = recorder.finish(record.t_done + 1)
    assert level.completed == 1 and level.empty == 1
    assert level.histograms[Metric.TTFT].count == 0 and level.window_output_tokens == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_interim_responses_are_skipped_and_a_protocol_switch_is_a_named_failure(transport: str) -> None:
    """Issue 31, item 3: the native wire took 100 Continue / 103 Early Hints as the answer (stream_broken)
    and let 101's HttpParserUpgrade out as a traceback."""
    answer = SSE_HEAD + chunked(b'data: {"choices":[{"text":"a"}]}\n\ndata: [DONE]\n\n') + b"0\r\n\r\n"
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\n"
    record = await one_request(sends(interim + answer), transport)
    assert record.error is None and len(record.chunk_times) == 1, record
    switch = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
    record = await one_request(sends(switch), transport)
    assert record.error is ErrorKind.PROTOCOL, record  # issue 57 R8: aiohttp said stream_broken
    assert record.error_detail


def test_the_sse_cap_is_a_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from loadgen.cli import app
    from loadgen.results import load
    from loadgen.sim.faults import FaultConfig
    from loadgen.sim.openai_app import SimOptions
    from loadgen.sim.server import SimProcess

    runner = CliRunner()
    counts = {}
    with SimProcess(SimOptions(faults=FaultConfig(oversized=0.5))) as sim:  # one ~1 MiB chunk in half the streams
        for mib in ("4", "0.5"):
            out = tmp_path / f"{mib}.json"
            result = runner.invoke(app, ["run", "--url", sim.base_url, "--concurrency", "2", "--requests", "16",
                                         "--max-tokens", "4", "--max-event-mib", mib, "-o", str(out)])  # fmt: skip
            assert result.exit_code == 0, result.output
            counts[mib] = load(out).levels[0].errors.get(ErrorKind.MALFORMED_CHUNK, 0)
    assert counts["4"] == 0 and counts["0.5"] >= 3
    refused = runner.invoke(
        app, ["run", "--url", "sim", "--requests", "1", "--concurrency", "1", "--max-event-mib", "0"]
    )
    assert refused.exit_code == 2 and "--max-event-mib" in refused.stderr


def test_answers_shorter_than_asked_are_said_with_the_fix() -> None:
    # A server that stops at end-of-sequence answers fewer tokens than max_tokens asked.
    from loadgen.load import Load
    from loadgen.results import Results, RunInfo, Target
    from loadgen.run.metrics import LevelRecorder
    from loadgen.wire.records import RequestRecord
    from planner.reports.report import caveats

    recorder = LevelRecorder(Load(kind="concurrency", value=1), window_start=0.0)
    for i, tokens in enumerate((20, 24, 28)):
        t = float(i)
        times = tuple(t + 0.1 + 0.01 * k for k in range(tokens))
        recorder.add(
            RequestRecord(
                t_intended=t,
                t_slot=None,
                t_sent=t,
                t_first=times[0],
                t_last=times[-1],
                t_done=times[-1],
                chunk_times=times,
                chunk_tokens=None,
                output_tokens=tokens,
                output_tokens_estimated=False,
                prompt_tokens=8,
                error=None,
                http_status=200,
            )
        )
    level = recorder.finish(3.0)
    settings = RunSettings(output_tokens={"mean": 32, "dist": "fixed", "spread": 0.0})
    results = Results(
        run=RunInfo(id="r", started_at="t", tool_version="0", python="3", platform="L", cpu_count=1, command="run"),
        target=Target("u", "m", "chat"),
        settings=settings,
        levels=(level,),
        complete=True,
    )
    said = [c for c in caveats(results) if "stopped early" in c]
    assert len(said) == 1 and "averaged 24 tokens where up to 32" in said[0] and "ignore_eos" in said[0]
    results = Results(
        run=results.run,
        target=results.target,
        settings=RunSettings(output_tokens={"mean": 26}),
        levels=(level,),
        complete=True,
    )
    assert not any("stopped early" in c for c in caveats(results))


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
@pytest.mark.parametrize("done", [True, False], ids=["with-done", "finish-reason-only"])
async def test_a_stream_that_ends_with_the_connection_is_complete(transport: str, done: bool) -> None:
    # HTTP/1.0-style: no length, no chunking; the body ends when the server closes the connection
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    events = b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"b","finish_reason":"length"}]}\n\n'
    record = await one_request(sends(head + events + (b"data: [DONE]\n\n" if done else b"")), transport)
    assert record.error is None, record
    assert len(record.chunk_times) == 2


@pytest.mark.asyncio
async def test_the_native_wire_keeps_one_connection_for_sequential_streams() -> None:
    from loadgen.sim.server import SimProcess
    from loadgen.wire.client import WiredClient

    with SimProcess() as sim:
        async with make_http_client(
            sim.base_url + "/", {}, HttpOptions(timeout_s=10, transport=Transport.NATIVE)
        ) as http:
            assert isinstance(http, WiredClient)
            body = BODY.replace(b'"m"', b'"sim-model"')
            for _ in range(3):
                record = await stream_request(http, "completions", body, Api.COMPLETIONS, t_intended=time.monotonic(),
                                              clock=time.monotonic, timeout_s=10)  # fmt: skip
                assert record.error is None and record.output_tokens == 4, record
                # the answer is over at [DONE]; the connection is back in the pool once the HTTP message's
                # last chunk has been read too, which may come in a later read
                for _ in range(500):
                    if http.wire.idle:
                        break
                    await asyncio.sleep(0.01)
            assert len(http.wire.open) == 1 and len(http.wire.idle) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
@pytest.mark.parametrize("tail", [b"", b"x" * 100], ids=["silent", "body-after-done"])
async def test_an_answer_whose_http_message_never_ends_holds_no_more_connections_than_streams(
    transport: str, tail: bytes
) -> None:
    """Issue 31, item 1: after [DONE] the server keeps the message open (nothing more, or stray body bytes
    and never the last chunk). Each answer is complete for the caller, and the client holds at most one
    connection per stream: the native wire leaked one per request (~800 open files after 12 s at c=4)."""
    events = chunked(b'data: {"choices":[{"text":"a"}]}\n\n') + chunked(b"data: [DONE]\n\n")
    events += chunked(tail) if tail else b""  # an empty chunk would be the last chunk: the message's end

    async def answer(_: int) -> bytes:  # each request on a connection, never ending the message
        return SSE_HEAD + events

    options = HttpOptions(timeout_s=5, transport=transport)  # type: ignore[arg-type]
    async with keep_alive_server(answer) as server, make_http_client(server.url, {}, options) as http:

        async def worker() -> list[RequestRecord]:
            return [await post_on(http) for _ in range(10)]

        records = [r for rs in await asyncio.gather(*(worker() for _ in range(4))) for r in rs]
    assert all(r.error is None for r in records), [r.error_detail for r in records if r.error]
    assert server.most_open <= 4 + 1, f"{server.most_open} connections open at once for 4 streams"


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nx-endless: ", b"HTTP/1.1 200 "], ids=["header", "status-line"])
async def test_an_endless_response_head_is_refused_as_it_grows(transport: str, head: bytes) -> None:
    """Issue 31, item 2: the native wire checked its 64 KiB cap only when a header ended, so an endless
    header value (or status line) grew memory until --timeout. The server offers 64 MiB of it, then
    hangs up; the request must fail as a protocol error (not a connection closed after it all)."""

    async def endless(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        for _ in range(6_400):
            writer.write(b"a" * 10_240)
            await writer.drain()

    started = time.monotonic()
    record = await one_request(endless, transport)
    assert record.error == ErrorKind.PROTOCOL, record
    assert time.monotonic() - started < 5


def test_non_finite_gauges_and_an_unclosed_label_set_are_not_samples() -> None:
    """Issue 31, items 9 and 17: a /metrics line with '{' but no '}' was a traceback; NaN and +Inf gauges
    were written into results as NaN/Infinity (not JSON)."""
    from loadgen.run.promtext import parse_samples, read_gauges

    text = (
        'vllm:num_requests_running{engine="0"} NaN\n'
        'vllm:num_requests_running{engine="1"} 3\n'
        "vllm:num_requests_waiting +Inf\n"
        'vllm:num_requests_waiting{engine="0" 7\n'
    )
    assert parse_samples(text) == {"vllm:num_requests_running": 3.0}
    gauges = read_gauges(text)
    assert gauges is not None and (gauges.running, gauges.waiting) == (3.0, 0.0)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("models", "expected"),
    [
        (b'{"data": [{"id": null}, {"id": 7}, {"id": "served"}]}', "served"),
        (b'{"data": [{"id": null}]}', "lists no model; pass --model"),
        (b'{"data": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "did not return an OpenAI model list"),
    ],
    ids=["null-ids-skipped", "only-null", "deep-json"],
)
async def test_models_ids_that_name_no_model_are_skipped_and_a_deep_list_is_refused(
    models: bytes, expected: str
) -> None:
    """Issue 31, items 9 and 17: an id null became the model "None"; a 200,000-deep list was a traceback."""
    import httpx

    from loadgen.errors import EndpointError
    from loadgen.wire.target import resolve_model

    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(models)
    async with raw_server(sends(head + models)) as url, httpx.AsyncClient(base_url=url + "/") as http:
        try:
            model, _ = await resolve_model(http, url, None)
        except EndpointError as exc:
            assert expected in str(exc)
        else:
            assert model == expected


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_endless_models_and_metrics_bodies_are_cut_at_their_cap(transport: str) -> None:
    """Issue 31, item 9: an endless /models reached 2.16 GB in 4.4 s, an endless /metrics 2.14 GB during the
    automatic probe (httpx reads a body whole). The server offers 256 MiB; the client stops at the cap."""
    from loadgen.errors import EndpointError
    from loadgen.run.scrape import probe
    from loadgen.wire.target import resolve_model

    async def endless(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(chunked(b'{"data": [{"id": "'))
        for _ in range(4_096):
            writer.write(chunked(b"a" * 65_536))
            await writer.drain()

    started = time.monotonic()
    async with raw_server(endless) as url:
        options = HttpOptions(timeout_s=30, transport=transport)  # type: ignore[arg-type]
        async with make_http_client(url + "/", {}, options) as http:
            with pytest.raises(EndpointError, match="/models answered past 8 MiB"):
                await resolve_model(http, url, None)
            assert not await probe(http, url + "/metrics")
    assert time.monotonic() - started < 20


def test_secrets_a_server_echoes_by_any_path_reach_no_artefact(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 31, item 7: three paths the scrubber missed: a chunk id -> records response_id; a /models id ->
    results target.model, settings.model and the report; a bare Basic token (base64 of user:pass) in an
    in-stream error -> records. A real run against a server that echoes all three."""
    import subprocess
    import sys

    from typer.testing import CliRunner

    from loadgen.cli import app

    key, user, password = "sk-live-123456", "ann", "pw-9876"
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    models = b'{"data": [{"id": "model-%s"}]}' % key.encode()
    ok_chunk = b'data: {"id": "%s", "choices": [{"text": "a"}]}\n\n' % key.encode()
    error = b'data: {"error": {"message": "bad credential %s"}}\n\n' % token.encode()
    answers = [
        SSE_HEAD + chunked(ok_chunk + b"data: [DONE]\n\n") + b"0\r\n\r\n",
        SSE_HEAD + chunked(error) + b"0\r\n\r\n",
    ]
    # the probes pass (the calibration's first, which its missing usage ends, and the length probe); then every
    # other request fails. Counted, not chosen by the body: a prompt's nonce is each run's own
    posts = 0

    async def serve() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal posts
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = next(
                        (
                            int(ln.split(b":")[1])
                            for ln in head.split(b"\r\n")
                            if ln.lower().startswith(b"content-length")
                        ),
                        0,
                    )
                    await reader.readexactly(length)  # the body: read, not looked at
                    if head.startswith(b"GET") and b"/models" in head.split(b"\r\n")[0]:
                        writer.write(
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                            % len(models)
                            + models
                        )
                    elif head.startswith(b"GET"):
                        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    else:
                        writer.write(answers[posts % 2 if posts >= 2 else 0])
                        posts += 1
                    await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        out, records, report = tmp_path / "r.json", tmp_path / "rec.jsonl", tmp_path / "report.md"
        url = f"http://{user}:{password}@127.0.0.1:{port}/v1"
        argv = [sys.executable, "-m", "loadgen", "run", "--url", url, "--header", f"X-Api-Key: {key}", "--api", "completions",
                "--concurrency", "1", "--requests", "6", "--max-tokens", "1", "--warmup", "0", "--scrape-metrics", "off",
                "--records", str(records), "-o", str(out)]  # fmt: skip
        async with server:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
        assert out.exists(), stderr.decode()
        assert CliRunner().invoke(app, ["report", str(out), "-o", str(report)]).exit_code == 0
        texts = {p.name: p.read_text() for p in (out, records, report)} | {"output": (stdout + stderr).decode()}
        for name, text in texts.items():
            for secret in (key, token, password):
                assert secret not in text, (name, secret)
        # each path was taken: the model id, the chunk ids and the error were kept, scrubbed
        assert '"model": "model-<redacted>"' in texts["r.json"]
        rows = [json.loads(line) for line in texts["rec.jsonl"].splitlines()]
        assert {r["response_id"] for r in rows if r["response_id"]} == {"<redacted>"}
        assert any("bad credential <redacted>" in (r["error_detail"] or "") for r in rows)

    asyncio.run(serve())


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_the_pool_reuses_the_newest_connection_so_the_oldest_expire_unused(transport: str) -> None:
    """Issue 31, item 22: aiohttp's pool handed out the connection idle the longest, the one a server's
    keep-alive timeout is about to close, and the POST crossing that close failed (281 of 850 counted
    connect). After a burst opens 8 connections, a trickle of requests must keep to one of them."""
    answer = SSE_HEAD + chunked(b'data: {"choices":[{"text":"a"}]}\n\n') + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    served: list[int] = []  # per request: the connection (its number) that carried it

    async def on(connection: int) -> bytes:
        served.append(connection)
        await asyncio.sleep(0.05)  # long enough for the burst to need a connection each
        return answer

    options = HttpOptions(timeout_s=5, transport=transport)  # type: ignore[arg-type]
    async with keep_alive_server(on) as server, make_http_client(server.url, {}, options) as http:
        burst = await asyncio.gather(*(post_on(http) for _ in range(8)))
        trickle = [await post_on(http) for _ in range(8)]
    assert all(r.error is None for r in [*burst, *trickle])
    # the trickle keeps to one of the burst's connections (httpx's pool, which closes a connection whose
    # answer was left at [DONE] before its last chunk, opens new ones: it never rotates through old ones)
    assert len(set(served[8:]) & set(range(1, 9))) <= 1, (server.opened, served)


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_an_unsolicited_extra_response_is_never_taken_as_the_next_answer(transport: str) -> None:
    """Issue 31, item 14: a server that sends a second, unasked-for response after the first answer. The
    next request on the pool must read its own answer, not that leftover (the pools poll a connection's
    socket before reuse: bytes nobody asked for make it no connection to send on)."""

    def answer(text: bytes) -> bytes:
        event = b'data: {"choices":[{"text":"%s"}]}\n\n' % text
        return SSE_HEAD + chunked(event) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"

    first = True

    async def on(_: int) -> bytes:
        nonlocal first
        data = answer(b"asked") + (answer(b"LEFTOVER") if first else b"")
        first = False
        return data

    texts: list[str] = []
    options = HttpOptions(timeout_s=5, transport=transport)  # type: ignore[arg-type]
    async with keep_alive_server(on) as server, make_http_client(server.url, {}, options) as http:
        for _ in range(3):
            text: list[str] = []
            record = await stream_request(http, "completions", BODY, Api.COMPLETIONS, t_intended=time.monotonic(),
                                          clock=time.monotonic, timeout_s=5, answer=text)  # fmt: skip
            assert record.error is None, record
            texts.append("".join(text))
            await asyncio.sleep(0.02)
    assert texts == ["asked"] * 3


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_an_endless_run_of_interim_responses_ends_named_with_memory_flat(transport: str) -> None:
    """Issue 57 R6: a server answering ``100 Continue`` forever grew aiohttp's memory per stream until
    ``--timeout`` (225 MB at 20 s). The native wire caps the head bytes it reads before the answer (protocol,
    at once); aiohttp and httpx skip each interim response as it ends and hold nothing of it, so the
    request ends at its timeout. Either way a named failure, and memory stays flat while the flood lasts."""
    import tracemalloc

    async def flood(writer: asyncio.StreamWriter) -> None:
        interim = b"HTTP/1.1 100 Continue\r\n\r\n" * 2000  # ~50 KB a write, as fast as the client reads
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and not writer.is_closing():
            writer.write(interim)
            await writer.drain()

    tracemalloc.start()
    try:
        async with raw_server(flood) as url:
            options = HttpOptions(timeout_s=2, transport=transport)  # type: ignore[arg-type]
            async with make_http_client(url + "/", {}, options) as http:
                record = await stream_request(http, "completions", BODY, Api.COMPLETIONS,
                                              t_intended=time.monotonic(), clock=time.monotonic, timeout_s=2)  # fmt: skip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert record.error in (ErrorKind.PROTOCOL, ErrorKind.TIMEOUT) and record.error_detail, record
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB held while the interim responses flowed"


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_a_responses_stream_that_completes_before_its_deltas_is_malformed(transport: str) -> None:
    """Issue 70, S11: ``response.completed`` (usage: 3 output tokens) before any delta counted as an empty
    success (0 tok/s, nothing timed); the deltas after it were never read."""
    completed = b'{"type":"response.completed","response":{"id":"r1","usage":{"input_tokens":2,"output_tokens":3}}}'
    delta = b'{"type":"response.output_text.delta","delta":"w "}'
    early = SSE_HEAD + chunked(b"".join(b"data: %s\n\n" % e for e in (completed, delta, delta, delta))) + b"0\r\n\r\n"
    body = b'{"model": "m", "input": "hi", "max_output_tokens": 4, "stream": true}'
    async with raw_server(sends(early)) as url:
        options = HttpOptions(timeout_s=10, transport=transport)  # type: ignore[arg-type]
        async with make_http_client(url + "/", {}, options) as http:
            record = await stream_request(
                http, "responses", body, Api.RESPONSES, t_intended=time.monotonic(), clock=time.monotonic, timeout_s=10
            )
    assert record.error == ErrorKind.MALFORMED_CHUNK, record
    assert record.error_detail == "response.completed before any of its 3 tokens"


def _json_answer(doc: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(doc), doc)


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
@pytest.mark.parametrize(
    ("api", "doc", "said"),
    [
        (Api.RERANK, b'{"results":[{"index":0,"relevance_score":0.5},{"index":1000000000,"relevance_score":0.1}]}',
         "names none of the 2 documents"),
        (Api.RERANK, b'{"results":[{"index":0,"relevance_score":0.5},{"index":0,"relevance_score":0.1}]}',
         "names none of the 2 documents, or one twice"),
        (Api.RERANK, b'{"results":[{"index":0,"relevance_score":null},{"index":1,"relevance_score":0.1}]}',
         "relevance_score is not a number"),
        (Api.EMBEDDINGS, b'{"data":[{"embedding":[0.1,0.2]},{"embedding":[0.1]}]}', "2 different lengths"),
        (Api.EMBEDDINGS, b'{"data":[{"embedding":[0.1,0.2]},{"object":"embedding"}]}', "an input has no embedding"),
    ],
    ids=["index-1e9", "index-twice", "null-score", "ragged", "missing"],
)  # fmt: skip
async def test_a_pooled_answer_is_checked_item_by_item_not_by_count(
    transport: str, api: Api, doc: bytes, said: str
) -> None:
    """Issue 70, S16: rerank indices that name no document, null scores and embeddings of different lengths in
    one answer were successes: only the number of items was checked."""
    from loadgen.wire.pooled import pooled_request

    async with raw_server(sends(_json_answer(doc))) as url:
        options = HttpOptions(timeout_s=10, transport=transport)  # type: ignore[arg-type]
        async with make_http_client(url + "/", {}, options) as http:
            record = await pooled_request(
                http, "x", b"{}", api, 2, t_intended=time.monotonic(), clock=time.monotonic, timeout_s=10
            )
    assert record.error == ErrorKind.MALFORMED_CHUNK and said in (record.error_detail or ""), record
