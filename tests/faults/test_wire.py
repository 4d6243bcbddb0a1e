"""Every transport over real sockets: framings, byte-by-byte reads, keep-alive, TLS."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest
import trustme

from loadgen.api import Api
from loadgen.choices import Transport
from loadgen.errors import ErrorKind
from loadgen.wire.client import HttpOptions, make_http_client, stream_request
from loadgen.wire.records import RequestRecord
from tests.faults.rawserver import chunked, keep_alive_server, raw_server, sends, trickles

BODY = b'{"model": "m", "prompt": "hi", "max_tokens": 3, "stream": true}'
EVENTS = [
    b'data: {"id":"cmpl-1","choices":[{"text":"h\xc3\xa9"}]}',  # a two-byte character, split by a trickle
    b'data: {"choices":[{"text":"llo"}]}',
    b'data: {"choices":[{"text":"!","finish_reason":"length"}],"usage":{"completion_tokens":3,"prompt_tokens":2}}',
    b"data: [DONE]",
]


def stream(newline: bytes, framing: str) -> bytes:
    """The events as one HTTP response: an HTTP chunk per event, or one body with its length."""
    events = [e + newline + newline for e in EVENTS]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    if framing == "chunked":
        return head + b"transfer-encoding: chunked\r\n\r\n" + b"".join(map(chunked, events)) + b"0\r\n\r\n"
    body = b"".join(events)
    return head + b"content-length: %d\r\n\r\n%s" % (len(body), body)


async def post_on(http: httpx.AsyncClient) -> RequestRecord:
    return await stream_request(http, "completions", BODY, Api.COMPLETIONS, t_intended=time.monotonic(),
                                clock=time.monotonic, timeout_s=10)  # fmt: skip


async def post(url: str, transport: str, *, verify: bool = True) -> RequestRecord:
    options = HttpOptions(timeout_s=10, transport=transport, verify_tls=verify)  # type: ignore[arg-type]
    async with make_http_client(url + "/", {}, options) as http:
        return await post_on(http)


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
@pytest.mark.parametrize("framing", ["chunked", "content-length"])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("byte_by_byte", [False, True], ids=["whole", "trickled"])
async def test_every_framing_and_split_reads_the_same_stream(
    transport: str, framing: str, newline: bytes, byte_by_byte: bool
) -> None:
    data = stream(newline, framing)
    async with raw_server(trickles(data) if byte_by_byte else sends(data)) as url:
        record = await post(url, transport)
    assert record.error is None, record
    assert len(record.chunk_times) == 3 and record.output_tokens == 3 and record.prompt_tokens == 2
    assert record.response_id == "cmpl-1"


def fields(head: bytes) -> tuple[bytes, dict[bytes, list[bytes]]]:
    """(request line, header name -> values) of one request head."""
    line, *rest = head.rstrip(b"\r\n").split(b"\r\n")
    out: dict[bytes, list[bytes]] = {}
    for field in rest:
        name, value = field.split(b":", 1)
        out.setdefault(name.strip().lower(), []).append(value.strip())
    return line, out


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_every_transport_sends_the_same_request_head(transport: str) -> None:
    # the native wire merges the head once per path and reuses it: each request must still carry its own
    # length and its own id, the URL's query, and the user's headers once (an id replaces a same-named one)
    heads: list[bytes] = []
    options = HttpOptions(timeout_s=10, transport=transport)  # type: ignore[arg-type]
    defaults = {"Authorization": "Bearer k", "X-Request-Id": "from-user", "X-Team": "a"}
    reply = stream(b"\n", "chunked").replace(b"\r\n", b"\r\nconnection: close\r\n", 1)  # one request each
    async with raw_server(sends(reply), heads) as url, make_http_client(url + "/?q=1", defaults, options) as http:
        for body in (BODY, BODY + b" "):
            record = await stream_request(http, "completions", body, Api.COMPLETIONS, t_intended=time.monotonic(),
                                          clock=time.monotonic, timeout_s=10, request_id_header="X-Request-Id")  # fmt: skip
            assert record.error is None, record
    (line1, first), (line2, second) = map(fields, heads)
    assert line1 == line2 == b"POST /v1/completions?q=1 HTTP/1.1"
    assert [first[b"content-length"], second[b"content-length"]] == [[b"%d" % len(BODY)], [b"%d" % (len(BODY) + 1)]]
    assert first[b"authorization"] == [b"Bearer k"] and first[b"x-team"] == [b"a"]
    assert first[b"content-type"] == [b"application/json"] and b"host" in first
    ids = first[b"x-request-id"] + second[b"x-request-id"]
    assert len(ids) == 2 and len(set(ids)) == 2 and b"from-user" not in ids


@pytest.mark.asyncio
async def test_a_kept_alive_connection_closed_by_the_server_is_replaced_not_failed() -> None:
    # the server closes each connection after its answer without saying so (as a keep-alive timeout does),
    # and its close is in the socket before the event loop has seen it: the wire polls an idle connection
    # before reusing it, so the next request goes out on a new one instead of failing for nothing
    heads: list[bytes] = []
    options = HttpOptions(timeout_s=10, transport=Transport.NATIVE)
    async with raw_server(sends(stream(b"\n", "chunked")), heads) as url, make_http_client(url, {}, options) as http:
        for _ in range(4):
            record = await post_on(http)
            assert record.error is None and record.output_tokens == 3, record
    assert len(heads) == 4  # each request sent once


@pytest.mark.asyncio
async def test_each_request_on_a_kept_alive_connection_expires_at_its_own_deadline() -> None:
    # The native wire keeps one deadline timer per connection: the one set for the first request fires
    # while the second is in flight on the same connection, and must re-arm for the second's deadline,
    # neither expiring it early nor letting it hang past its own.
    timeout_s, first_s = 0.6, 0.4
    answered = 0

    async def answer(connection: int) -> bytes:
        nonlocal answered
        answered += 1
        await asyncio.sleep(first_s if answered == 1 else 30.0)  # the second answer never comes in time
        return stream(b"\n", "chunked")

    options = HttpOptions(timeout_s=timeout_s, transport=Transport.NATIVE)
    async with keep_alive_server(answer) as server, make_http_client(server.url, {}, options) as http:

        async def post_timed() -> RequestRecord:
            return await stream_request(http, "completions", BODY, Api.COMPLETIONS, t_intended=time.monotonic(),
                                        clock=time.monotonic, timeout_s=timeout_s)  # fmt: skip

        first = await post_timed()
        second = await post_timed()
    assert first.error is None and server.opened == 1  # the second went out on the same connection
    assert second.error is ErrorKind.TIMEOUT
    # the first request's timer fired ~0.2 s into the second: it must not have cut it there
    assert timeout_s - 0.01 <= second.t_done - second.t_sent < timeout_s + 2.0, second.t_done - second.t_sent


@pytest.mark.asyncio
async def test_a_shorter_timeout_on_a_kept_alive_connection_expires_at_its_own_deadline() -> None:
    # The connection's timer still stands at the first request's later deadline (60 s) when the second,
    # given 0.4 s, goes out on it: the timer must move to the earlier deadline, not wait for its own.
    answered = 0

    async def answer(connection: int) -> bytes:
        nonlocal answered
        answered += 1
        await asyncio.sleep(0.0 if answered == 1 else 30.0)
        return stream(b"\n", "chunked")

    options = HttpOptions(timeout_s=60.0, transport=Transport.NATIVE)
    async with keep_alive_server(answer) as server, make_http_client(server.url, {}, options) as http:

        async def post_within(timeout_s: float) -> RequestRecord:
            return await stream_request(http, "completions", BODY, Api.COMPLETIONS, t_intended=time.monotonic(),
                                        clock=time.monotonic, timeout_s=timeout_s)  # fmt: skip

        first = await post_within(60.0)
        second = await asyncio.wait_for(post_within(0.4), timeout=10.0)
    assert first.error is None and server.opened == 1
    assert second.error is ErrorKind.TIMEOUT
    assert 0.39 <= second.t_done - second.t_sent < 2.4, second.t_done - second.t_sent


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_a_server_that_hangs_up_unanswered_is_a_connect_error_named_as_such(transport: str) -> None:
    async with raw_server(sends(b"")) as url:  # reads the request, closes without a byte
        record = await post(url, transport)
    assert record.error is ErrorKind.CONNECT
    assert record.error_detail and "Timeout" not in record.error_detail, record.error_detail


@pytest.mark.asyncio
async def test_a_reset_on_a_kept_alive_connection_is_counted_not_retried() -> None:
    # the server answers the first request, then aborts (RST) on the second: that is a server failure
    requests: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in (True, False):
            head = await reader.readuntil(b"\r\n\r\n")
            requests.append(head)
            await reader.readexactly(len(BODY))
            if not answer:
                writer.transport.abort()
                return
            writer.write(stream(b"\n", "chunked"))
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    async with server, make_http_client(url, {}, HttpOptions(timeout_s=10, transport=Transport.NATIVE)) as http:
        records = [await post_on(http) for _ in range(2)]
    assert records[0].error is None and records[1].error is ErrorKind.CONNECT
    assert len(requests) == 2  # not sent a third time


@pytest.fixture(scope="module")
def tls() -> Iterator[tuple[trustme.CA, ssl.SSLContext]]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    yield ca, server


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", tuple(Transport))
async def test_tls_is_verified_and_insecure_skips_it(
    transport: str, tls: tuple[trustme.CA, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, server = tls
    async with raw_server(sends(stream(b"\n", "chunked")), ssl=server) as url:
        untrusted = await post(url, transport)
        assert untrusted.error == ErrorKind.CONNECT, untrusted  # the certificate's CA is not trusted
        assert (await post(url, transport, verify=False)).error is None  # --insecure
        with ca.cert_pem.tempfile() as pem:
            monkeypatch.setenv("SSL_CERT_FILE", pem)  # the system's trust store, as a user would extend it
            trusted = await post(url, transport)
        assert trusted.error is None, trusted
