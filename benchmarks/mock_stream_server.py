"""A zero-work streaming target whose truth is known: fixed TTFT, fixed gap, pre-serialised chunks.

Not the simulator: its batching law makes latency depend on load, and its
per-step bookkeeping would cost more than the client under test. Here every
stream is independent: the first chunk is written ``--ttft-ms`` after the
request arrived, then one chunk every ``--gap-ms``, on absolute deadlines
(no drift), so the truth is TTFT = ttft, TPOT = ITL = gap whatever the load,
as long as this server keeps up (it reports how late it wrote). Where it does
not, the truth is still known: the first chunk's id is
``bench-<arrived>-<written>``, the ``time.monotonic_ns()`` at which the
request's bytes were read and the first chunk was written, so a client's
TTFT can be held to what this server actually did (``--records`` keep the id).

It must keep up at 256+ streams on one core, which an aiohttp handler per
stream (one timer and one coroutine wake-up per chunk) did not: the target,
not the client under test, was then the source of the TTFT tail. So this is
a bare ``asyncio.Protocol`` (HTTP/1.1 request framing by httptools, chunked
responses) with one deadline heap for all streams: one timer fires for the
earliest deadline and writes every chunk that is due, however many streams
that is.

``/v1/completions`` streams text chunks; ``/v1/chat/completions`` streams chat deltas shaped by the
model the request names: ``bench`` the answer's ``content``, ``bench-reasoning`` a reasoning model's
(its first half of tokens ``reasoning_content``, then the answer), ``bench-tool`` an agent's tool call
(its arguments token by token), so the client's cost per token can be compared across the shapes.

    python benchmarks/mock_stream_server.py --port 0   # prints the base URL
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import heapq
import itertools
import json
import time
from typing import cast

import httptools

HEAD = {"id": "bench", "object": "text_completion", "created": 0, "model": "bench"}
STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
LATE_S = 0.002  # a write later than this behind its deadline counts as late


def chunked(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk carrying ``payload``."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def event(body: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


SHAPES = {  # a chat stream's delta for each model name (and, for a reasoning model, its first half's)
    "bench": ({"content": "tok "}, None),
    "bench-reasoning": ({"content": "tok "}, {"reasoning_content": "hmm "}),
    "bench-tool": ({"tool_calls": [{"index": 0, "function": {"arguments": '"k":1,'}}]}, None),
}


def token_chunk(finish: str | None, response_id: str, delta: dict[str, object] | None = None) -> bytes:
    """One framed token chunk of the response ``response_id``: a completion's text, or a chat ``delta``."""
    choice: dict[str, object] = {"index": 0, "text": "tok "} if delta is None else {"index": 0, "delta": delta}
    choice |= {"logprobs": None, "finish_reason": finish}
    obj = "text_completion" if delta is None else "chat.completion.chunk"
    return chunked(event({**HEAD, "object": obj, "id": response_id, "choices": [choice]}))


@functools.cache
def end_of_body(tokens: int) -> bytes:
    """Usage, done and the body's end, serialised and framed once per length."""

    usage = {
        **HEAD,
        "choices": [],
        "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
    }
    return chunked(event(usage) + b"data: [DONE]\n\n") + b"0\r\n\r\n"


def plain(status: str, body: dict[str, object]) -> bytes:
    """A complete JSON response with a Content-Length."""
    data = json.dumps(body).encode()
    return f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data


class Stream:
    """One response in flight: where it writes and how far it has got.

    Every token chunk of a response carries its id, as a real server's do; the id is made at the first
    write, which it stamps, and the response's two token chunks are serialised then, once.
    """

    __slots__ = ("arrived_ns", "early", "last", "regular", "sent", "shape", "t0", "tokens", "transport")

    def __init__(self, transport: asyncio.Transport, t0: float, arrived_ns: int, tokens: int, shape: str | None):
        self.transport, self.t0, self.arrived_ns, self.sent, self.tokens = transport, t0, arrived_ns, 0, tokens
        self.shape = shape  # a chat model's name in SHAPES (None: a completion)
        self.regular = self.last = self.early = b""

    def name(self, tail: bytes) -> None:
        """Make this response's chunks, named ``bench-<arrived>-<written>`` (``time.monotonic_ns()``);
        ``tail``: what follows its last token (usage, ``[DONE]``, the chunked terminator)."""
        response_id = f"bench-{self.arrived_ns}-{time.monotonic_ns()}"
        delta, first_half = SHAPES[self.shape] if self.shape is not None else (None, None)
        self.regular, self.last = (
            token_chunk(None, response_id, delta),
            token_chunk("length", response_id, delta) + tail,
        )
        self.early = token_chunk(None, response_id, first_half) if first_half is not None else self.regular


class Scheduler:
    """Every stream's next write on one heap, served by one timer armed for the earliest deadline."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ttft_s: float, gap_s: float) -> None:
        self.loop, self.ttft_s, self.gap_s = loop, ttft_s, gap_s
        self.heap: list[tuple[float, int, Stream]] = []
        self.seq = itertools.count()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = float("inf")
        self.late_writes = 0
        self.writes = 0

    def start(self, transport: asyncio.Transport, arrived_ns: int, tokens: int, shape: str | None = None) -> None:
        transport.write(STREAM_HEAD)
        stream = Stream(transport, self.loop.time(), arrived_ns, tokens, shape)
        self._push(stream.t0 + self.ttft_s, stream)

    def _push(self, deadline: float, stream: Stream) -> None:
        heapq.heappush(self.heap, (deadline, next(self.seq), stream))
        if deadline < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = deadline
            self.timer = self.loop.call_at(deadline, self._fire)

    def _fire(self) -> None:
        self.timer, self.timer_at = None, float("inf")
        now = self.loop.time()
        heap = self.heap
        while heap and heap[0][0] <= now + 0.0005:
            deadline, _, stream = heapq.heappop(heap)
            if stream.transport.is_closing():
                continue
            if now - deadline > LATE_S:
                self.late_writes += 1
            self.writes += 1
            if not stream.sent:
                stream.name(end_of_body(stream.tokens))
            stream.sent += 1
            if stream.sent < stream.tokens:
                stream.transport.write(stream.early if 2 * stream.sent <= stream.tokens else stream.regular)
                heapq.heappush(heap, (stream.t0 + self.ttft_s + stream.sent * self.gap_s, next(self.seq), stream))
            else:
                stream.transport.write(stream.last)
        if heap:
            self.timer_at = heap[0][0]
            self.timer = self.loop.call_at(self.timer_at, self._fire)


class Connection(asyncio.Protocol):
    """HTTP/1.1 keep-alive connection: parses requests, answers the three routes."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body = bytearray()
        self.arrived_ns = 0  # when the read that ended the request came in

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        self.arrived_ns = time.monotonic_ns()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(plain("400 Bad Request", {"error": "bad request"}))
            self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url, self.body = b"", bytearray()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        transport = self.transport
        assert transport is not None
        method, path = self.parser.get_method(), self.url.split(b"?", 1)[0]
        if method == b"POST" and path in (b"/v1/completions", b"/v1/chat/completions"):
            request = json.loads(self.body or b"{}")
            tokens = int(request.get("max_tokens", 16))
            shape = str(request.get("model", "bench")) if path == b"/v1/chat/completions" else None
            if shape is not None and shape not in SHAPES:
                transport.write(plain("404 Not Found", {"error": f"no model {shape}"}))
                return
            self.scheduler.start(transport, self.arrived_ns, max(tokens, 1), shape)
        elif method == b"GET" and path == b"/v1/models":
            models = [{"id": name, "object": "model"} for name in SHAPES]
            transport.write(plain("200 OK", {"object": "list", "data": models}))
        elif method == b"GET" and path == b"/stats":
            stats = {"late_writes": self.scheduler.late_writes, "writes": self.scheduler.writes}
            transport.write(plain("200 OK", stats))
        else:
            transport.write(plain("404 Not Found", {"error": "not found"}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    args = parser.parse_args()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        scheduler = Scheduler(loop, args.ttft_ms / 1000, args.gap_ms / 1000)
        server = await loop.create_server(lambda: Connection(scheduler), "127.0.0.1", args.port, backlog=4096)
        port = server.sockets[0].getsockname()[1]
        print(f"http://127.0.0.1:{port}/v1", flush=True)
        await server.serve_forever()

    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve())


if __name__ == "__main__":
    main()
