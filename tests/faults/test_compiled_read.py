"""The compiled per-read path (``loadgen.wire.fastread``) against its reference, the Python connection alone.

Both read the same bytes, cut into the same socket reads, on a connection whose clock counts its
calls: the events, token counts, timestamps, texts, outcome and the connection's fate must be the
same, whatever the stream holds (plain tokens with every kind of text, a reasoning model's thoughts
and an agent's tool-call arguments between them, usage, finish, errors, comments, CRLF, events split
across HTTP chunks and reads, spoiled bytes, invalid UTF-8).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.api import Api
from loadgen.wire import client, native
from loadgen.wire.sse import Convention, SSEDecoder

pytestmark = pytest.mark.skipif(
    native.FASTREAD is None, reason="the compiled reader is not built (or LOADGEN_PURE_WIRE is set)"
)

STREAMED = [api for api in Api if not api.pooling]  # the pooling APIs answer one JSON body
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Socket(asyncio.Transport):
    """The connection's transport: it takes the request and notes an abort (no socket needed to feed bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def write(self, data: Any) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for every example (a loop per example was most of the property's time)."""
    with asyncio.Runner() as loop_runner:
        yield loop_runner


def read(
    reads: list[bytes], api: Api, *, compiled: bool, keep_text: bool, limit: int, runner: asyncio.Runner
) -> tuple[object, ...]:
    """Feed ``reads`` to one connection as socket reads; everything the exchange and the pool ended with."""

    async def go() -> tuple[object, ...]:
        wire = native.Wire("http://127.0.0.1:9", compiled=compiled)
        conn = native._Connection(wire)
        assert (conn.port is not None) == compiled
        socket = Socket()
        conn.protocol.connection_made(socket)
        ticks = itertools.count()
        texts: list[str] | None = [] if keep_text else None
        state = client._StreamState(Convention.TOKENS, texts)
        times: list[float] = []
        cumulative: list[int | None] = []
        exchange = client._WireExchange(api, state, SSEDecoder(limit), lambda: float(next(ticks)), times, cumulative)
        conn.start(exchange, b"POST /v1/completions HTTP/1.1\r\n\r\n")
        for piece in reads:
            if socket.aborted:
                break
            conn.protocol.data_received(piece)
        if not socket.aborted:
            conn.protocol.connection_lost(None)
        return (
            exchange.status,
            exchange.outcome(),
            times,
            cumulative,
            texts,
            state.response_id,
            state.completion_tokens,
            state.prompt_tokens,
            state.finish_reason,
            tuple(state.reasoning_at),  # which timed events were thoughts (the time to the first answer token)
            state.tool_call,
            next(ticks),  # how many times the clock was read
            len(wire.idle),
            len(wire.draining),
            socket.aborted,
        )

    return runner.run(go())


TEXT = st.one_of(
    st.sampled_from(
        ["tok ", " the", "é", "日本", "\n", '"', "\\", "a\u2028b", "", "\x7f", "😀", "Zq7loadgenSentinel4w"]
    ),
    st.text(max_size=6),
)


@st.composite
def event(draw: st.DrawFn, api: Api) -> list[bytes]:
    """One SSE event's bytes, as a server may write it (one piece, or a line and then the rest): mostly
    plain tokens of one response, then anything a server may send."""
    kind = draw(
        st.sampled_from(
            ["token"] * 6
            + ["thought"] * 3
            + ["tool"] * 2
            + ["finish", "usage", "error", "role", "comment", "other", "raw"]
            + ["lines"] * 2
        )
    )
    text = draw(TEXT)
    choice: dict[str, object] = {"index": 0, "finish_reason": None}
    if api == Api.COMPLETIONS:
        choice["text"] = text
    elif kind == "thought":  # a reasoning model's thoughts, then (another kind) its answer: a second cut
        choice["delta"] = {draw(st.sampled_from(["reasoning_content", "reasoning"])): text}
    elif kind == "tool":  # an agent's tool call, its arguments token by token
        choice["delta"] = {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}
    else:
        choice["delta"] = {"content": text}
    body: dict[str, object] = {"id": "cmpl-1", "object": "chunk", "created": 1, "model": "m", "choices": [choice]}
    if kind == "finish":
        choice["finish_reason"] = "length"
    elif kind == "usage":
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": draw(st.integers(0, 9))}
    elif kind == "error":
        body = {"error": {"message": "overloaded"}}
    elif kind == "role":
        choice["delta"] = {"role": "assistant", "content": ""}
    elif kind == "other":
        body["created"] = draw(st.integers(1, 3))  # the same shape with another constant: a new cut to learn
    elif kind == "comment":
        return [b": ping\n\n"]
    elif kind == "raw":
        return [draw(st.sampled_from([b"data: [DONE]\n\n", b"data: {not json\n\n", b"event: x\ndata: {}\n\n"]))]
    data = json.dumps(body, ensure_ascii=draw(st.booleans()), separators=draw(st.sampled_from([None, (",", ":")])))
    # "lines": a token's line after another line of the same event (one event's data is every data line)
    line = b"data: " + data.encode() + b"\n\n"
    if kind == "lines":
        return [draw(st.sampled_from([b"data: 1\n", b"event: delta\n", b": ping\n"])), line]
    return [line]


@st.composite
def stream(draw: st.DrawFn, api: Api) -> list[bytes]:
    """A whole response (head, chunked body, end), cut into socket reads."""
    events = [piece for written in draw(st.lists(event(api), max_size=12)) for piece in written]
    if draw(st.booleans()):
        events.append(b"data: [DONE]\n\n")
    body = b"".join(events)
    if draw(st.booleans()):  # one HTTP chunk per write (the servers' way), else anywhere
        pieces = events
    else:  # anywhere, or after a line (a piece then starts as a whole event does, with part of one held)
        ends = [i + 1 for i, byte in enumerate(body) if byte == 0x0A] or [0]
        cut = st.one_of(st.integers(0, len(body)), st.sampled_from(ends))
        cuts = sorted(draw(st.lists(cut, max_size=6)))
        pieces = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)]) if b > a]
    if draw(st.booleans()):
        pieces = [p.replace(b"\n", b"\r\n") for p in pieces]
    if pieces and draw(st.integers(0, 4)) == 0:  # a spoiled byte anywhere in the body
        i = draw(st.integers(0, len(pieces) - 1))
        piece = bytearray(pieces[i])
        j = draw(st.integers(0, len(piece) - 1))
        piece[j] = draw(st.sampled_from([0xFF, 0xC3, 0x22, 0x5C, 0x0A, 0x0D, 0x00, 0x7B]))
        pieces[i] = bytes(piece)
    raw = HEAD + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    reads = sorted(draw(st.lists(st.integers(1, len(raw) - 1), max_size=5)))
    if draw(st.booleans()):  # or one read per HTTP chunk, as a streaming server's writes mostly arrive
        marks = list(itertools.accumulate(len(b"%x\r\n%s\r\n" % (len(p), p)) for p in pieces))
        reads = [len(HEAD) + m for m in marks[:-1]] if marks else []
    return [raw[a:b] for a, b in itertools.pairwise([0, *reads, len(raw)]) if b > a]


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(STREAMED), st.booleans(), st.sampled_from([60, 10_000, 10_000]))
def test_the_compiled_reader_ends_every_stream_as_the_python_path_does(
    runner: asyncio.Runner, data: st.DataObject, api: Api, keep_text: bool, limit: int
) -> None:
    reads = data.draw(stream(api))
    pure = read(reads, api, compiled=False, keep_text=keep_text, limit=limit, runner=runner)
    fast = read(reads, api, compiled=True, keep_text=keep_text, limit=limit, runner=runner)
    assert fast == pure


def counting(calls: list[bytes]) -> type[client._WireExchange]:
    """An exchange that notes every piece the Python path is handed: none where the compiled reader takes them."""

    class Counted(client._WireExchange):
        def on_body(self, data: bytes, tested: bool = False) -> bool:
            calls.append(data)
            return super().on_body(data, tested)

    return Counted


def test_the_compiled_reader_takes_the_plain_tokens_of_a_stream() -> None:
    """Not only the same answer: the compiled path must take the common chunks itself, or it gains nothing."""
    token = b'data: {"id":"c","choices":[{"index":0,"text":"%s","finish_reason":null}]}\n\n'
    pieces = [token % t for t in (b"a", b"bb", b"c", "\u00e9".encode(), b"d")]
    raw = HEAD + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    calls: list[bytes] = []

    async def go() -> list[float]:
        conn = native._Connection(native.Wire("http://127.0.0.1:9", compiled=True))
        conn.protocol.connection_made(Socket())
        times: list[float] = []
        state = client._StreamState(Convention.TOKENS)
        exchange = counting(calls)(Api.COMPLETIONS, state, SSEDecoder(), lambda: 1.0, times, [])
        conn.start(exchange, b"POST / HTTP/1.1\r\n\r\n")
        conn.protocol.data_received(raw)
        return times

    assert asyncio.run(go()) == [1.0] * 5
    # the first names the response and is learned from: every one is the compiled path's own
    assert calls == []


def test_the_compiled_reader_takes_a_reasoning_models_thoughts_and_an_agents_tool_calls_itself() -> None:
    """Issue 71: these streams fell back to the Python path at every chunk (1.5-1.8x the CPU per token).
    Thoughts, the answer, then a tool call's arguments: three cuts learned, every chunk taken here, the
    thoughts marked where the Python path marks them."""
    chunk = b'data: {"id":"c","choices":[{"index":0,"delta":%s,"finish_reason":null}]}\n\n'
    deltas = [b'{"reasoning_content":"%s"}' % t for t in (b"so", b"then\\n")]  # escapes in a text not kept
    deltas += [b'{"content":"%s"}' % t for t in (b"It", b" is")]
    # a tool call's arguments are JSON in a string: mostly escaped quotes
    deltas += [b'{"tool_calls":[{"index":0,"function":{"arguments":"%s"}}]}' % t for t in (b'{\\"k', b'\\":1}')]
    pieces = [chunk % d for d in deltas]
    raw = HEAD + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    calls: list[bytes] = []

    async def go() -> client._StreamState:
        conn = native._Connection(native.Wire("http://127.0.0.1:9", compiled=True))
        conn.protocol.connection_made(Socket())
        state = client._StreamState(Convention.TOKENS, [])
        exchange = counting(calls)(Api.CHAT, state, SSEDecoder(), lambda: 1.0, [], [])
        conn.start(exchange, b"POST / HTTP/1.1\r\n\r\n")
        conn.protocol.data_received(raw)
        return state

    state = asyncio.run(go())
    assert calls == [] and state.reasoning_at == [0, 1] and state.tool_call and state.texts == ["It", " is"]


class CountedParser:
    """llhttp, counting the reads it is fed (the compiled path frames the plain chunks between them itself)."""

    def __init__(self, parser: Any) -> None:
        self.parser, self.fed = parser, 0

    def feed_data(self, data: bytes) -> None:
        self.fed += 1
        self.parser.feed_data(data)


def test_the_compiled_reader_frames_whole_chunks_itself_and_reads_time_monotonic_to_the_bit() -> None:
    """Once llhttp has ended a chunk, reads of whole plain chunks never reach it, and the clock is read in
    C: each stamp lies between two ``time.monotonic`` readings around it; the last chunk is llhttp's again."""
    token = b'data: {"id":"c","choices":[{"index":0,"text":"%s","finish_reason":null}]}\n\n'
    chunk = [b"%x\r\n%s\r\n" % (len(p), p) for p in (token % t for t in (b"a", b"b", b"c", b"d", b"e", b"f"))]

    async def go() -> tuple[list[float], list[float], int, int]:
        wire = native.Wire("http://127.0.0.1:9", compiled=True)
        conn = native._Connection(wire)
        conn.protocol.connection_made(Socket())
        counted = CountedParser(conn.parser)
        assert conn.port is not None
        conn.port.parser = counted
        times: list[float] = []
        state = client._StreamState(Convention.TOKENS)
        exchange = client._WireExchange(Api.COMPLETIONS, state, SSEDecoder(), time.monotonic, times, [])
        conn.start(exchange, b"POST / HTTP/1.1\r\n\r\n")
        marks = [time.monotonic()]
        for read in (HEAD + chunk[0], chunk[1], chunk[2] + chunk[3], chunk[4], chunk[5] + b"0\r\n\r\n"):
            conn.protocol.data_received(read)
            marks.append(time.monotonic())
        return times, marks, counted.fed, len(wire.idle)

    times, marks, fed, idle = asyncio.run(go())
    assert len(times) == 6 and idle == 1  # every token, and the message ended: the connection is reusable
    # the port feeds llhttp the last read only (the final chunk): the reads between were whole chunks
    # (the head's read went to llhttp through the connection, not counted here)
    assert fed == 1
    # stamps 0..5 were read during reads 0, 1, 2, 2, 3, 4: each between the readings around its read
    for stamp, read in zip(times, (0, 1, 2, 2, 3, 4), strict=True):
        assert marks[read] <= stamp <= marks[read + 1]


TOKEN = b'data: {"id":"c","choices":[{"index":0,"text":"%s","finish_reason":null}]}\n\n'


@pytest.mark.parametrize(
    "writes",
    [
        [TOKEN % b"a", TOKEN % b"b", b"data: 1\n", TOKEN % b"c", TOKEN % b"d"],  # a data line held: one event
        [TOKEN % b"a", TOKEN % b"b", b"event: x\r", TOKEN % b"c"],  # a CR held: its LF may follow
        [TOKEN % b"a", TOKEN % b"b", (TOKEN % "\u00e9".encode())[:-5], (TOKEN % b"e")[-5:], TOKEN % b"f"],
        [TOKEN % b"a", TOKEN % b"b", TOKEN % b"x\\u00e9", TOKEN % b'\\"', TOKEN % b"\xff", TOKEN % b""],
        [TOKEN % b"a", TOKEN % b"Zq7loadgenSentinel4w", TOKEN % b"b", TOKEN % b"c"],
        [TOKEN % b"a", TOKEN % b"b", TOKEN.replace(b"null", b'"stop"') % b"c", TOKEN % b"d"],
    ],
    ids=["data-line-held", "cr-held", "utf8-split", "escapes-and-invalid", "sentinel-as-text", "finish-then-more"],
)
def test_the_compiled_reader_reads_the_awkward_writes_as_the_python_path_does(
    runner: asyncio.Runner, writes: list[bytes]
) -> None:
    raw = HEAD + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in writes) + b"0\r\n\r\n"
    for reads in ([raw], [raw[i : i + 7] for i in range(0, len(raw), 7)]):
        pure = read(reads, Api.COMPLETIONS, compiled=False, keep_text=True, limit=10_000, runner=runner)
        assert read(reads, Api.COMPLETIONS, compiled=True, keep_text=True, limit=10_000, runner=runner) == pure


def test_a_leading_byte_order_mark_is_stripped_on_both_read_paths(runner: asyncio.Runner) -> None:
    """Issue 57 R11: a UTF-8 BOM before the first event dropped the first token (the standard strips it)."""
    writes = [b"\xef\xbb\xbf" + TOKEN % b"a", TOKEN % b"b", TOKEN % b"c"]
    raw = HEAD + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in writes) + b"0\r\n\r\n"
    for compiled in (False, True):
        for reads in ([raw], [raw[i : i + 5] for i in range(0, len(raw), 5)]):
            got = read(reads, Api.COMPLETIONS, compiled=compiled, keep_text=True, limit=10_000, runner=runner)
            times, texts = got[2], got[4]
            assert texts == ["a", "b", "c"] and isinstance(times, list) and len(times) == 3, (compiled, got)


def test_loadgen_pure_wire_switches_the_compiled_reader_off() -> None:
    code = "from loadgen.wire import native; print(native.READ_PATH, native.Wire('http://127.0.0.1:9').compiled)"
    for value, expected in (("1", "python False"), ("0", "compiled True")):
        env = {**os.environ, "LOADGEN_PURE_WIRE": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split() == expected.split()
