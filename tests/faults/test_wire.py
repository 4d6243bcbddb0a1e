"""Every transport over real sockets: framings, byte-by-byte reads, keep-alive, TLS."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator

import pytest
import trustme

from loadgen.client import TRANSPORTS, HttpOptions, make_http_client, stream_request
from loadgen.errors import ErrorKind
from loadgen.records import RequestRecord
from tests.faults.rawserver import chunked, raw_server, sends, trickles

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


async def post(url: str, transport: str, *, verify: bool = True) -> RequestRecord:
    options = HttpOptions(timeout_s=10, transport=transport, verify_tls=verify)  # type: ignore[arg-type]
    async with make_http_client(url + "/", {}, options) as http:
        return await stream_request(http, "completions", BODY, "completions", t_intended=time.monotonic(),
                                    clock=time.monotonic, timeout_s=10)  # fmt: skip


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", TRANSPORTS)
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


@pytest.fixture(scope="module")
def tls() -> Iterator[tuple[trustme.CA, ssl.SSLContext]]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    yield ca, server


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", TRANSPORTS)
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
