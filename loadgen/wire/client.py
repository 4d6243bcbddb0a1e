"""One streaming request: timestamps only, no metric math, no progress, no env.

``stream_request`` sends a prepared body, feeds the body bytes to the SSE
decoder, stamps the clock at every token event (or text chunk), and returns
a ``RequestRecord``. Failures are data: each ends as a record with an
``ErrorKind``. ``CancelledError`` always propagates.

``make_http_client`` builds the ``httpx.AsyncClient`` with limits and
timeouts set explicitly (httpx's 5 s timeout and 100-connection pool are
wrong for a load tester). Three transports carry the streams: ``native``
(default; ``loadgen.wire.native``, llhttp on an asyncio protocol, the body decoded
and timed in the read callback: the cheapest and the most exact at high
concurrency), ``aiohttp`` (aiohttp's pool under httpx's API) and ``httpx``
(httpx's own h11 pool, which collapses past ~64 concurrent streams).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
import sys
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from loadgen.api import Api
from loadgen.choices import EventLoop, Transport
from loadgen.errors import ErrorKind, UsageError, error_kind_for_status
from loadgen.limits import MAX_EVENT_CHARS
from loadgen.wire.native import MAX_HEADER_BYTES, SWITCHED_PROTOCOLS, Wire, has_input
from loadgen.wire.reasons import ERROR_BODY_BYTES, failure_reason, server_reason, timed_out
from loadgen.wire.records import Clock, RequestRecord
from loadgen.wire.sse import (
    DONE,
    Convention,
    MalformedChunk,
    SSEDecoder,
    SSEError,
    SSEEvent,
    parse_chunk,
)
from loadgen.wire.target import split_endpoint
from loadgen.wire.token_chunks import REASONING, TOOL_ARGUMENTS, token_chunk, token_chunk_named


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpOptions:
    """Connection settings for the load generator's HTTP client."""

    timeout_s: float = 600.0  # whole-request limit, and the read limit between bytes
    connect_timeout_s: float = 30.0
    max_connections: int = 0  # 0: unlimited (the load model bounds concurrency, not the pool)
    verify_tls: bool = True
    transport: Transport = Transport.NATIVE
    max_event_chars: int = MAX_EVENT_CHARS  # an SSE line or event beyond this fails its request (--max-event-mib)
    request_id_header: str | None = "X-Request-Id"  # a unique id per request, to find it in the server's logs
    event_loop: EventLoop = EventLoop.AUTO  # the loop the streams run on (loadgen.wire.loops): uvloop where installed


def tls_context(verify: bool) -> ssl.SSLContext:
    """httpx's TLS context (certifi's roots, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``; none with ``verify``
    False), built once per process and trust store.

    Loading the CA bundle costs ~25 ms of CPU, and httpx does it for every client it builds, even one
    that only ever speaks plain HTTP; a sweep and the planner's checks build several. The key is where
    OpenSSL looks for roots now, so pointing ``SSL_CERT_FILE`` at another bundle builds a fresh context.
    """
    paths = ssl.get_default_verify_paths()
    return _tls_context(verify, paths.cafile, paths.capath)


@functools.lru_cache(maxsize=8)
def _tls_context(verify: bool, cafile: str | None, capath: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context(verify=verify)


def make_http_client(base_url: str, headers: Mapping[str, str], options: HttpOptions) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` tuned for many long-lived concurrent streams (HTTP/1.1 keep-alive).

    The base URL's query rides on every request and its user info becomes
    Basic auth (``loadgen.wire.target.split_endpoint``).
    """
    endpoint = split_endpoint(base_url)
    if endpoint.auth_headers and any(k.lower() == "authorization" for k in headers):
        raise UsageError("credentials in the URL and an API key (or an Authorization header): give one of them")
    base_url, params = endpoint.base_url, endpoint.params
    headers = {**headers, **endpoint.auth_headers}
    timeout = httpx.Timeout(options.timeout_s, connect=options.connect_timeout_s, pool=None)
    if options.transport == "httpx":
        limits = httpx.Limits(
            max_connections=options.max_connections or None,
            max_keepalive_connections=options.max_connections or None,
        )
        return httpx.AsyncClient(
            base_url=base_url,
            params=params,
            headers=headers,
            timeout=timeout,
            limits=limits,
            verify=tls_context(options.verify_tls),
        )
    if options.transport == "native":
        wire = Wire(
            base_url,
            verify_tls=options.verify_tls,
            connect_timeout_s=options.connect_timeout_s,
            max_connections=options.max_connections,
        )
        return WiredClient(
            wire,
            base_url=base_url,
            params=params,
            headers={"accept-encoding": "identity", **headers},  # the wire reads bytes as they come
            timeout=timeout,
            verify=tls_context(options.verify_tls),
        )
    ssl_ctx: ssl.SSLContext | bool = ssl.create_default_context() if options.verify_tls else False
    connector = _NewestFirstConnector(limit=options.max_connections, ssl=ssl_ctx, keepalive_timeout=60.0)
    session = aiohttp.ClientSession(  # headers up to the cap every transport shares (aiohttp's own: 8 KiB)
        connector=connector, auto_decompress=False, max_line_size=MAX_HEADER_BYTES, max_field_size=MAX_HEADER_BYTES
    )
    return httpx.AsyncClient(
        base_url=base_url,
        params=params,
        headers=headers,
        timeout=timeout,
        transport=AiohttpTransport(verify=tls_context(options.verify_tls), client=session),
    )


class _NewestFirstConnector(aiohttp.TCPConnector):
    """aiohttp's pool, handing out the connection used last (and not one whose server has closed it).

    aiohttp's pool is first in, first out: it hands out the connection idle
    the longest, the one a server's keep-alive timeout is about to close, and
    a POST sent on it as the close crosses it fails (aiohttp retries only
    idempotent methods): 281 of 850 requests were counted ``connect``
    failures against a server with a keep-alive timeout. The native wire and
    httpx reuse the newest connection, after polling its socket; so does
    this, and the oldest ones expire unused. (``_get``, ``_conns`` and
    ``_create_connection`` are aiohttp's internals; without them, aiohttp's
    own pool.)
    """

    async def _get(self, key: Any, traces: list[Any]) -> Any:
        pooled = getattr(self, "_conns", {}).get(key)
        while pooled:
            newest = pooled.pop()  # released connections are appended on the right
            if not has_input(getattr(newest[0], "transport", None)):
                pooled.appendleft(newest)  # aiohttp takes from the left
                break
            newest[0].close()  # the server's close is waiting in its socket
        return await super()._get(key, traces)

    async def _create_connection(self, *args: Any, **kwargs: Any) -> Any:
        # a connection given up just before (an answer left unread at [DONE]) closes its socket on the
        # loop's next turn: let it, before opening another (else a server that never ends its messages
        # keeps ~2x the streams' sockets open)
        await asyncio.sleep(0)
        return await super()._create_connection(*args, **kwargs)


class WiredClient(httpx.AsyncClient):
    """httpx for the control requests (``/models``, ``/metrics``); ``loadgen.wire.native`` for the streams."""

    def __init__(self, wire: Wire, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wire = wire
        self._heads: dict[tuple[str, str], tuple[bytes, bytes]] = {}

    def serialise_post(self, path: str, body: bytes, tag: tuple[str, str] | None) -> bytes:
        """A streaming POST as HTTP/1.1 bytes, its head merged by httpx once per path.

        httpx merges the base URL, the default headers (credentials, the
        user's ``--header``s) and the path; doing that for every request cost
        more than streaming its answer's first tokens, and only the length
        (and the optional request id, ``tag``: header name and value) changes
        from one request to the next.
        """
        name = tag[0] if tag else ""
        head = self._heads.get((path, name))
        if head is None:
            request = self.build_request("POST", path, content=b"", headers={"content-type": "application/json"})
            dropped = {b"content-length", name.lower().encode()}  # set per request (an id replaces a default)
            fields = b"".join(b"%s: %s\r\n" % (k, v) for k, v in request.headers.raw if k.lower() not in dropped)
            head = self._heads[(path, name)] = (b"POST %s HTTP/1.1\r\n" % request.url.raw_path, fields)
        start, fields = head
        tagged = b"%s: %s\r\n" % (name.encode(), tag[1].encode()) if tag else b""
        return b"%s%s%scontent-length: %d\r\n\r\n%s" % (start, fields, tagged, len(body), body)

    async def __aexit__(self, *exc: Any) -> None:
        await self.wire.close()
        await super().__aexit__(*exc)


_READ_TIMEOUTS = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout)


async def stream_request(
    http: httpx.AsyncClient,
    path: str,
    body: bytes,
    api: Api,
    *,
    t_intended: float,
    t_slot: float | None = None,
    clock: Clock,
    timeout_s: float,
    convention: Convention = Convention.TOKENS,
    max_event_chars: int = MAX_EVENT_CHARS,
    request_id_header: str | None = None,
    answer: list[str] | None = None,
    on_cut: Callable[[RequestRecord], None] | None = None,
    max_tokens: int = 0,
) -> RequestRecord:
    """Send one streaming completion request and time its token events (or text chunks).

    With ``request_id_header``, the request carries a fresh id in that header
    (vLLM and most gateways log it); the record keeps it beside the response's
    own id, so a slow request can be found in the server's logs. With
    ``answer``, the streamed text is appended to it (a multi-turn session sends
    it back as history); it is never stored. Cancelled in flight (the level's
    drain limit, an interrupt), it hands ``on_cut`` the record so far, marked
    ``cut``, before the cancellation goes on. ``max_tokens`` (the request's own, 0 for none we can read)
    bounds the token events taken: a stream past ``event_cap`` of them ends as ``malformed_chunk``.
    """
    times: list[float] = []
    cumulative: list[int | None] = []  # per timed chunk: usage.completion_tokens so far, if sent
    state = _StreamState(convention, answer, max_tokens)
    # (header, this request's id): 32 random hex digits, as uuid4().hex without building a UUID
    tag = (request_id_header, os.urandom(16).hex()) if request_id_header else None
    decoder = SSEDecoder(max_event_chars)
    t_sent = clock()
    try:
        if isinstance(http, WiredClient):
            wire_bytes = http.serialise_post(path, body, tag)
            t_sent = clock()
            exchange = _WireExchange(api, state, decoder, clock, times, cumulative)
            if await http.wire.post(wire_bytes, exchange, timeout_s):
                status, (error, detail) = exchange.status, exchange.outcome()
            else:
                status, error, detail = exchange.status, ErrorKind.TIMEOUT, timed_out(timeout_s)
        else:
            headers = {"content-type": "application/json"}
            if tag:
                headers[tag[0]] = tag[1]
            request = http.build_request("POST", path, content=body, headers=headers)
            t_sent = clock()
            status, error, detail = await _over_httpx(
                http, request, api, state, decoder, clock, timeout_s, times, cumulative
            )
    except asyncio.CancelledError:
        if on_cut is not None:  # what it streamed before the level ended, for the records
            on_cut(_record(t_intended, t_slot, t_sent, clock(), times, cumulative, state, None, None, None, tag, True))
        raise
    return _record(t_intended, t_slot, t_sent, clock(), times, cumulative, state, error, status, detail, tag)


async def _over_httpx(
    http: httpx.AsyncClient,
    request: httpx.Request,
    api: Api,
    state: _StreamState,
    decoder: SSEDecoder,
    clock: Clock,
    timeout_s: float,
    times: list[float],
    cumulative: list[int | None],
) -> tuple[int | None, ErrorKind | None, str | None]:
    """One request through httpx (over aiohttp's pool or httpx's own): status, failure kind, reason."""
    status: int | None = None
    error: ErrorKind | None = None
    detail: str | None = None
    in_body = False
    try:
        async with asyncio.timeout(timeout_s):
            response = await http.send(request, stream=True)
            try:
                status = response.status_code
                content_type = response.headers.get("content-type", "")
                if sum(len(k) + len(v) for k, v in response.headers.raw) > MAX_HEADER_BYTES:
                    # the cap every transport shares (httpx's parser takes up to 100 KiB)
                    error, detail = ErrorKind.PROTOCOL, f"response headers over {MAX_HEADER_BYTES // 1024} KiB"
                elif status >= 400:
                    error, detail = error_kind_for_status(status), f"HTTP {status}{await server_reason(response)}"
                elif status == 101:  # aiohttp hands a protocol switch over as an answer: as the others, it is none
                    error, detail = ErrorKind.PROTOCOL, SWITCHED_PROTOCOLS
                elif content_type and "event-stream" not in content_type:
                    error, detail = ErrorKind.MALFORMED_CHUNK, _not_a_stream(content_type)
                else:
                    in_body = True
                    # aclosing: leaving the loop early ([DONE]) closes the body iterator now,
                    # not whenever the garbage collector finalises it
                    raw_chunks = cast(AsyncGenerator[bytes, None], response.aiter_raw())
                    async with contextlib.aclosing(raw_chunks) as body_chunks:
                        async for raw in body_chunks:
                            now = clock()
                            if state.consume(decoder.feed(raw), api, now, times, cumulative):
                                break
                        else:
                            state.consume(decoder.flush(), api, clock(), times, cumulative)
                    error, detail = state.outcome()
            finally:
                await response.aclose()
    except TimeoutError:
        error, detail = ErrorKind.TIMEOUT, timed_out(timeout_s)
    except _READ_TIMEOUTS as exc:
        error, detail = ErrorKind.TIMEOUT, type(exc).__name__
    except (SSEError, MalformedChunk) as exc:
        error, detail = ErrorKind.MALFORMED_CHUNK, str(exc)
    except (httpx.RemoteProtocolError, httpx.LocalProtocolError, aiohttp.ClientResponseError) as exc:
        # not valid HTTP (aiohttp's parser errors are ClientResponseErrors, not httpx errors); but httpcore
        # also reports a connection closed before any response byte this way, which is a connect failure
        # on every other transport
        silent = status is None and "without sending a response" in str(exc)
        cut = "peer closed" in str(exc) or "incomplete" in str(exc).lower()  # h11: the connection ended early
        error = (ErrorKind.STREAM_BROKEN if in_body and cut else ErrorKind.CONNECT if silent
                 else ErrorKind.PROTOCOL)  # fmt: skip
        detail = type(exc).__name__
    except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:
        # Once the body has started, any transport failure is a broken stream
        # (aiohttp reports a mid-stream disconnect with connection-error types).
        error = ErrorKind.STREAM_BROKEN if in_body else ErrorKind.CONNECT
        # httpx-aiohttp re-raises every aiohttp connection error as httpx.ConnectTimeout: the
        # reason is the error it wraps (a server that hung up is no timeout)
        cause = exc.__cause__ if isinstance(exc.__cause__, aiohttp.ClientError) else exc
        detail = type(cause).__name__
    return status, error, detail


def _not_a_stream(content_type: str) -> str:
    """An HTML error page or a JSON body where a stream was asked for: not a chunk stream."""
    return f"{content_type.split(';')[0][:60]} body, not an event stream"


class _WireExchange:
    """One request's answer on the native wire: decoded and timed inside the connection's callbacks.

    Every socket read is stamped once and decoded at once, so a read that
    carries several events costs one call, and the request's task sleeps
    until the answer is over.
    """

    __slots__ = ("api", "clock", "cumulative", "decoder", "error_body", "failure", "state", "status", "times")

    def __init__(
        self,
        api: Api,
        state: _StreamState,
        decoder: SSEDecoder,
        clock: Clock,
        times: list[float],
        cumulative: list[int | None],
    ) -> None:
        self.api, self.state, self.decoder, self.clock = api, state, decoder, clock
        self.times, self.cumulative = times, cumulative
        self.status: int | None = None
        self.error_body: bytearray | None = None  # a failed answer's first bytes, for its reason
        self.failure: tuple[ErrorKind, str] | None = None

    def on_response(self, status: int, content_type: str) -> bool:
        self.status = status
        if status >= 400:
            self.error_body = bytearray()
            return True
        if content_type and "event-stream" not in content_type:
            self.failure = ErrorKind.MALFORMED_CHUNK, _not_a_stream(content_type)
            return False
        return True

    def lane(self) -> tuple[Any, ...] | None:
        """For the compiled reader: the lists a plain token lands in, and the state it checks first."""
        if self.error_body is not None:
            return None
        state = self.state
        return (
            self.clock,
            self.times,
            self.cumulative,
            state.texts,
            self.decoder,
            state,
            token_chunk,
            token_chunk_named,
            self.api,
        )

    def on_body(self, data: bytes, tested: bool = False) -> bool:
        now = self.clock()
        if self.error_body is not None:
            self.error_body += data
            return len(self.error_body) < ERROR_BODY_BYTES
        state = self.state
        # the common chunk (one event, one plain token) without the general decoder and parser, the first
        # one naming the response; ``tested``: the compiled reader ran this very test
        # (``fastread.Port.take``) and the piece failed it
        if not tested and self.decoder.whole_event(data):
            if state.response_id is not None:
                token = token_chunk(data[6:-2], self.api)
            elif (named := token_chunk_named(data[6:-2], self.api)) is not None:
                token, state.response_id = named[:2], named[2]
            else:
                token = None
            if token is not None:
                text, kind = token
                if kind == REASONING:
                    state.reasoning_at.append(len(self.times))
                elif kind == TOOL_ARGUMENTS:
                    state.tool_call = True
                elif state.texts is not None:  # the history keeps the answer only
                    state.texts.append(text)
                self.times.append(now)
                self.cumulative.append(None)
                if len(self.times) <= state.most_events:
                    return True
                self.failure = ErrorKind.MALFORMED_CHUNK, state.overrun()
                return False
        try:
            return not state.consume(self.decoder.feed(data), self.api, now, self.times, self.cumulative)
        except (SSEError, MalformedChunk) as exc:
            self.failure = ErrorKind.MALFORMED_CHUNK, str(exc)
            return False

    def on_end(self, kind: ErrorKind | None, detail: str | None) -> None:
        if self.failure is not None or self.error_body is not None:
            return
        if kind is not None:
            self.failure = kind, detail or kind.value
            return
        if not self.state.done:  # the body ended: an event without its blank line still counts
            try:
                self.state.consume(self.decoder.flush(), self.api, self.clock(), self.times, self.cumulative)
            except (SSEError, MalformedChunk) as exc:
                self.failure = ErrorKind.MALFORMED_CHUNK, str(exc)

    def outcome(self) -> tuple[ErrorKind | None, str | None]:
        if self.status is not None and self.status >= 400:
            return error_kind_for_status(
                self.status
            ), f"HTTP {self.status}{failure_reason(bytes(self.error_body or b''))}"
        if self.failure is not None:
            return self.failure
        return self.state.outcome()


class _StreamState:
    """Parsing state of one response body."""

    __slots__ = ("by_token", "completion_tokens", "done", "error", "finish_reason", "image_tokens", "malformed",
                 "max_tokens", "most_events", "prompt_tokens", "reasoning_at", "reasoning_tokens", "response_id",
                 "texts", "tool_call")  # fmt: skip

    def __init__(self, convention: Convention, texts: list[str] | None = None, max_tokens: int = 0) -> None:
        self.texts = texts
        self.max_tokens = max_tokens
        self.most_events = event_cap(max_tokens)  # read by the compiled reader too (fastread.Port.arm)
        self.by_token = convention == "tokens"
        self.done = False
        self.finish_reason: str | None = None
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.image_tokens: int | None = None  # of the prompt's tokens, where the server's usage says them apart
        self.error: str | None = None
        self.malformed: str | None = None  # why an answer that ended cannot be what it says
        self.response_id: str | None = None
        # which timed events were reasoning alone (their indices in the times), marked by every read path
        self.reasoning_at: list[int] = []
        self.reasoning_tokens: int | None = None  # as the server's usage reports them
        self.tool_call = False

    def consume(
        self, events: list[SSEEvent], api: Api, now: float, times: list[float], cumulative: list[int | None]
    ) -> bool:
        """Fold events in; returns True once the stream is over ([DONE] or an error)."""
        for event in events:
            if event.data == DONE:
                self.done = True
                return True
            chunk = parse_chunk(event.data, api)
            if chunk.error is not None:
                self.error = chunk.error
                return True
            if chunk.completion_tokens is not None:
                self.completion_tokens = chunk.completion_tokens
            if chunk.prompt_tokens is not None:
                self.prompt_tokens = chunk.prompt_tokens
            if chunk.image_tokens is not None:
                self.image_tokens = chunk.image_tokens
            if chunk.finish_reason is not None:
                self.finish_reason = chunk.finish_reason
            if chunk.reasoning_tokens is not None:
                self.reasoning_tokens = chunk.reasoning_tokens
            if self.response_id is None:
                self.response_id = chunk.id
            if self.texts is not None and chunk.text and not chunk.reasoning:  # history: the answer only
                self.texts.append(chunk.text)
            self.tool_call |= chunk.tool_call
            if chunk.token if self.by_token else (chunk.text or chunk.tool_call):
                if chunk.reasoning:
                    self.reasoning_at.append(len(times))
                times.append(now)
                cumulative.append(chunk.completion_tokens)
                if len(times) > self.most_events:
                    raise MalformedChunk(self.overrun())
            if api is Api.RESPONSES and chunk.finish_reason is not None:  # response.completed: the last event
                if not times and chunk.completion_tokens:  # its usage counts tokens that no delta carried
                    self.malformed = (
                        f"response.{chunk.finish_reason} before any of its {chunk.completion_tokens} tokens"
                    )
                self.done = True
                return True
        return False

    def overrun(self) -> str:
        """Why a stream past its event cap was ended: an honest one ends by ``max_tokens``."""
        return f"over {self.most_events:,} token events where max_tokens was {self.max_tokens} (an endless stream?)"

    def outcome(self) -> tuple[ErrorKind | None, str | None]:
        if self.malformed is not None:
            return ErrorKind.MALFORMED_CHUNK, self.malformed
        if self.error is not None:
            return ErrorKind.STREAM_BROKEN, f"server error in stream: {self.error}"
        if self.done or self.finish_reason is not None:
            return None, None
        return ErrorKind.STREAM_BROKEN, "stream ended without [DONE] or a finish reason"


def event_cap(max_tokens: int) -> int:
    """The most token events a stream that asked for ``max_tokens`` may send before it is cut off as endless.

    An honest server sends at most one event per token, reasoning and tool-call arguments included in
    ``max_tokens``; twice that and 64 more leaves room for servers that split a token's text. Without a
    count to bound by (0), only ``--timeout`` bounds the stream, as it always did."""
    return 2 * max_tokens + 64 if max_tokens > 0 else sys.maxsize


def _record(
    t_intended: float,
    t_slot: float | None,
    t_sent: float,
    t_done: float,
    times: list[float],
    cumulative: list[int | None],
    state: _StreamState,
    error: ErrorKind | None,
    status: int | None,
    detail: str | None,
    tag: tuple[str, str] | None,
    cut: bool = False,
) -> RequestRecord:
    """The request's record, with the id it sent (``tag``) and the one the server's chunks carried."""
    estimated = state.completion_tokens is None
    output_tokens = len(times) if estimated else state.completion_tokens
    chunk_tokens: tuple[int, ...] | None = None
    if times and all(c is not None for c in cumulative):
        # vLLM's continuous usage stats: each chunk's token count is the usage delta.
        counts = [int(c) for c in cumulative if c is not None]
        chunk_tokens = tuple(b - a for a, b in zip([0, *counts], counts))
    reasoning = state.reasoning_at
    # the first answer token: the first event not reasoning alone (reasoning comes first, so this is short)
    first_output = next((i for i in range(len(times)) if i >= len(reasoning) or reasoning[i] != i), None)
    return RequestRecord(
        t_intended=t_intended,
        t_slot=t_slot,
        t_sent=t_sent,
        t_first=times[0] if times else None,
        t_first_output=None if first_output is None else times[first_output],
        reasoning_tokens=state.reasoning_tokens if state.reasoning_tokens is not None else len(reasoning) or None,
        reasoning_reported=state.reasoning_tokens is not None,
        tool_call=state.tool_call or state.finish_reason == "tool_calls",
        t_last=times[-1] if times else None,
        t_done=t_done,
        chunk_times=tuple(times),
        chunk_tokens=chunk_tokens,
        output_tokens=output_tokens,
        output_tokens_estimated=estimated,
        prompt_tokens=state.prompt_tokens,
        image_tokens=state.image_tokens,
        error=error,
        http_status=status,
        error_detail=detail,
        request_id=tag[1] if tag else None,
        response_id=state.response_id,
        cut=cut,
    )
