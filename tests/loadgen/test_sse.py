"""SSE decoding under any split of the bytes, and OpenAI chunk parsing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.api import Api
from loadgen.wire.sse import (
    Chunk,
    MalformedChunk,
    SSEDecoder,
    SSEError,
    SSEEvent,
    parse_chunk,
)
from loadgen.wire.token_chunks import REASONING, TOOL_ARGUMENTS, token_chunk, token_chunk_named


def encode(events: list[str], newline: str) -> bytes:
    out = []
    for data in events:
        out += [f"data: {line}{newline}" for line in data.split("\n")]
        out.append(newline)
    return "".join(out).encode()


def decode_in_pieces(raw: bytes, cuts: list[int]) -> list[SSEEvent]:
    decoder, events, prev = SSEDecoder(), [], 0
    for cut in [*sorted(set(cuts)), len(raw)]:
        events += decoder.feed(raw[prev:cut])
        prev = cut
    return events + decoder.flush()


safe_text = st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="\r\n"), max_size=30)


@given(
    events=st.lists(st.lists(safe_text, min_size=1, max_size=3).map("\n".join), min_size=1, max_size=6),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20),
)
def test_any_split_of_the_bytes_decodes_the_same_events(events: list[str], newline: str, cuts: list[int]) -> None:
    raw = encode(events, newline)
    cuts = [c for c in cuts if c <= len(raw)]
    assert [e.data for e in decode_in_pieces(raw, cuts)] == events


@given(
    events=st.lists(st.lists(safe_text, min_size=1, max_size=2).map("\n".join), min_size=1, max_size=5),
    spoil=st.one_of(st.none(), st.integers(0, 400)),
)
def test_a_piece_of_whole_events_reads_as_byte_by_byte(events: list[str], spoil: int | None) -> None:
    """A stream's last piece is often several whole events (usage, then [DONE]): read at once, they are
    the events (or the error) the incremental path reads from the same bytes one at a time."""
    raw = bytearray(encode(events, "\n"))
    if spoil is not None and spoil < len(raw):
        raw[spoil] = 0xFF  # invalid UTF-8 anywhere: the same error either way

    def read(pieces: list[bytes]) -> list[SSEEvent] | str:
        decoder = SSEDecoder()
        try:
            return [e for piece in pieces for e in decoder.feed(piece)]
        except SSEError as exc:
            return str(exc)

    assert read([bytes(raw)]) == read([bytes([b]) for b in raw])


@given(
    events=st.lists(st.lists(safe_text, min_size=1, max_size=2).map("\n".join), min_size=1, max_size=8),
    newline=st.sampled_from(["\n", "\r\n"]),
    splits=st.lists(st.integers(min_value=-1, max_value=40), min_size=8, max_size=8),
)
def test_events_fed_one_per_piece_decode_the_same_whatever_path(
    events: list[str], newline: str, splits: list[int]
) -> None:
    # Pieces on event boundaries take the decoder's one-event fast path; a piece cut inside an event
    # (split >= 0) sends the next ones through the general path until nothing is held again.
    decoder, got = SSEDecoder(), []
    for data, split in zip(events, splits):
        raw = encode([data], newline)
        pieces = [raw] if split < 0 or split >= len(raw) else [raw[:split], raw[split:]]
        for piece in pieces:
            got += decoder.feed(piece)
    got += decoder.flush()
    assert [e.data for e in got] == events


def test_split_inside_a_multibyte_character() -> None:
    raw = encode(["héllo 世界 🎉"], "\n")
    for cut in range(len(raw)):
        assert [e.data for e in decode_in_pieces(raw, [cut])] == ["héllo 世界 🎉"]


def test_crlf_split_between_cr_and_lf_yields_no_phantom_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [SSEEvent("a")]
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [SSEEvent("b")]


def test_one_leading_byte_order_mark_is_stripped() -> None:
    plain = SSEDecoder().feed(b"data: a\n\ndata: b\n\n")
    assert SSEDecoder().feed(b"\xef\xbb\xbfdata: a\n\ndata: b\n\n") == plain
    decoder = SSEDecoder()
    assert decoder.feed(b"\xef\xbb\xbfdata: a\n\n") + decoder.feed(b"data: b\n\n") == plain
    stream = b"\xef\xbb\xbfdata: a\n\ndata: b\n\n"
    decoder = SSEDecoder()
    assert [e for i in range(len(stream)) for e in decoder.feed(stream[i : i + 1])] == plain  # a BOM split too
    with pytest.raises(SSEError):  # only a whole BOM is stripped: its first two bytes are invalid UTF-8
        SSEDecoder().feed(b"\xef\xbbdata: a\n\n")


def test_comments_and_other_fields_are_skipped() -> None:
    raw = b": ping\n\nevent: delta\nid: 7\nretry: 10\ndata:x\n\n"
    assert SSEDecoder().feed(raw) == [SSEEvent("x", "delta")]


def test_line_separator_inside_data_is_not_a_line_break() -> None:
    assert SSEDecoder().feed("data: a\u2028b\n\n".encode()) == [SSEEvent("a\u2028b")]


def test_unterminated_last_event_counts_at_flush() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.flush() == [SSEEvent("[DONE]")]


def test_invalid_utf8_raises_the_decoders_own_error() -> None:
    with pytest.raises(SSEError):
        SSEDecoder().feed(b"data: \xff\xfe\n\n")


@given(st.lists(st.binary(max_size=50), max_size=10))
def test_garbage_raises_nothing_but_sse_error(pieces: list[bytes]) -> None:
    decoder = SSEDecoder()
    try:
        for p in pieces:
            decoder.feed(p)
        decoder.flush()
    except SSEError:
        pass


def chat(delta: dict[str, object], finish: str | None = None, usage: dict[str, int] | None = None) -> str:
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        obj["usage"] = usage
    return json.dumps(obj)


def test_parse_chat_content_reasoning_and_finish() -> None:
    assert parse_chunk(chat({"content": "hi"}), Api.CHAT).text == "hi"
    assert parse_chunk(chat({"reasoning_content": "hmm"}), Api.CHAT).text == "hmm"
    assert parse_chunk(chat({"role": "assistant", "content": ""}), Api.CHAT).text == ""
    assert parse_chunk(chat({"content": "x"}, "stop"), Api.CHAT).finish_reason == "stop"


def test_parse_usage_chunk_and_completions_text() -> None:
    usage = parse_chunk('{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}', Api.CHAT)
    assert usage == Chunk(completion_tokens=9, prompt_tokens=3)
    assert parse_chunk('{"choices": [{"text": "ab", "finish_reason": null}]}', Api.COMPLETIONS).text == "ab"


@pytest.mark.parametrize("choices", ["[]", '[{"delta": {"content": "hi"}, "finish_reason": "stop"}]'])
def test_image_tokens_are_kept_whether_the_usage_comes_alone_or_with_the_last_choice(choices: str) -> None:
    usage = '{"prompt_tokens": 600, "completion_tokens": 5, "prompt_tokens_details": {"image_tokens": 576}}'
    chunk = parse_chunk(f'{{"id": "x", "choices": {choices}, "usage": {usage}}}', Api.CHAT)
    assert (chunk.image_tokens, chunk.prompt_tokens, chunk.completion_tokens) == (576, 600, 5)


def test_in_stream_error_object_is_reported() -> None:
    assert parse_chunk('{"error": {"message": "boom"}}', Api.CHAT).error == "boom"


@pytest.mark.parametrize("data", ["{not json", "[]", '{"id": 1}', '{"choices": [1]}', '{"choices": [{"delta": 3}]}'])
def test_malformed_chunks_raise(data: str) -> None:
    with pytest.raises(MalformedChunk):
        parse_chunk(data, Api.CHAT)


@pytest.mark.parametrize(
    ("delta", "token"),
    [
        ({"role": "assistant", "content": ""}, False),  # vLLM's first chunk: the role, no token
        ({"content": ""}, True),  # a token that does not decode to complete text yet
        ({"content": "Hi"}, True),
        ({"role": "assistant", "content": "Hi"}, True),  # role and first token together
        ({"reasoning_content": ""}, True),
        ({}, False),  # a finish-only chunk
        ({"content": None}, False),
    ],
)
def test_token_events_include_empty_content_but_not_the_role_chunk(delta: dict[str, object], token: bool) -> None:
    chunk = parse_chunk(json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}), Api.CHAT)
    assert chunk.token is token


# Chunks in the shapes servers send and the ones they should not: the fast path must read each one
# it accepts exactly as parse_chunk does, and leave every other one to it.
_TEXT = st.one_of(st.text(min_size=1, max_size=5), st.just(""), st.none(), st.integers(0, 3))
_CALLS = st.one_of(
    _TEXT,
    st.lists(
        st.fixed_dictionaries(
            {"index": st.one_of(st.integers(0, 1), st.just(True))},
            optional={"function": st.fixed_dictionaries({}, optional={"arguments": _TEXT, "name": st.just("f")}),
                      "id": st.just("call_1")},
        ),
        max_size=2,
    ),
)  # fmt: skip
_DELTA = st.fixed_dictionaries(
    {},
    optional={"content": _TEXT, "role": _TEXT, "reasoning_content": _TEXT, "reasoning": _TEXT, "tool_calls": _CALLS},
)


@st.composite
def _chunk(draw: st.DrawFn) -> dict[str, object]:
    """A plain token chunk (text for completions, delta for chat), then maybe what makes it something else."""

    def sometimes() -> bool:
        return draw(st.integers(0, 3)) == 0

    role = {"role": st.just("assistant")}
    content = st.fixed_dictionaries({"content": _TEXT}, optional=role)
    thought = st.one_of(
        *(st.fixed_dictionaries({key: _TEXT}, optional=role) for key in ("reasoning_content", "reasoning"))
    )
    arguments = st.fixed_dictionaries({"index": st.just(0), "function": st.fixed_dictionaries({"arguments": _TEXT})})
    call = st.fixed_dictionaries({"tool_calls": st.lists(arguments, min_size=1, max_size=1)})
    choice: dict[str, object] = {"index": 0, "text": draw(_TEXT), "delta": draw(st.one_of(content, thought, call))}
    if sometimes():
        choice["delta"] = draw(st.one_of(_DELTA, st.none(), st.just("x")))
    if sometimes():
        choice["finish_reason"] = draw(st.one_of(st.none(), st.sampled_from(["stop", "length"]), st.just(3)))
    obj: dict[str, object] = {"id": "cmpl-1", "choices": [choice]}
    if sometimes():  # no id, or one to cut (ID_CHARS), or one that is no string: parse_chunk's id, or None
        obj["id"] = draw(st.one_of(st.none(), st.text(min_size=120, max_size=140), st.integers(0, 3)))
        if obj["id"] is None and sometimes():
            del obj["id"]
    if sometimes():
        obj["choices"] = draw(st.one_of(st.lists(st.just(choice), max_size=2), st.none(), st.just({}), st.just(["x"])))
    if sometimes():
        obj["usage"] = draw(st.one_of(st.none(), st.fixed_dictionaries({"completion_tokens": st.integers(0, 9)})))
    if sometimes():
        obj["error"] = draw(st.one_of(st.just("bad"), st.none()))
    return obj


@settings(max_examples=300)  # about one in ten drawn chunks is a plain token: ~30 reach the comparison
@given(_chunk(), st.sampled_from(["chat", "completions"]))
def test_the_plain_token_fast_path_reads_what_parse_chunk_reads(obj: dict[str, object], api: str) -> None:
    data = json.dumps(obj).encode()
    token = token_chunk(data, Api(api))
    if token is None:
        return
    text, kind = token
    chunk = parse_chunk(data.decode(), Api(api))
    assert chunk.token and chunk.error is None and chunk.finish_reason is None
    assert chunk.completion_tokens is None and chunk.prompt_tokens is None
    assert chunk.reasoning == (kind == REASONING) and chunk.tool_call == (kind == TOOL_ARGUMENTS)
    assert chunk.text == ("" if kind == TOOL_ARGUMENTS else text) and text != ""
    assert token_chunk_named(data, Api(api)) == (text, kind, chunk.id)  # a first token names its response alike


def test_the_plain_token_fast_path_takes_the_common_chunks_and_nothing_else() -> None:
    """Issue 71: a reasoning model's thoughts and an agent's tool-call arguments are common chunks too."""
    assert token_chunk(b'{"id":"c","choices":[{"index":0,"text":"hi","finish_reason":null}]}', Api.COMPLETIONS)
    assert token_chunk(b'{"choices":[{"delta":{"content":"hi"}}],"usage":null}', Api.CHAT) == ("hi", 0)
    assert token_chunk(b'{"choices":[{"delta":{"role":"assistant","content":"hi"}}]}', Api.CHAT) == ("hi", 0)
    assert token_chunk(b'{"choices":[{"delta":{"reasoning_content":"so"}}]}', Api.CHAT) == ("so", REASONING)
    assert token_chunk(b'{"choices":[{"delta":{"reasoning":"so"}}]}', Api.CHAT) == ("so", REASONING)
    call = b'{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a"}}]}}]}'
    assert token_chunk(call, Api.CHAT) == ('{"a', TOOL_ARGUMENTS)
    for data in (
        b'{"choices":[{"delta":{"role":"assistant","content":""}}]}',  # the role chunk: no token
        b'{"choices":[{"delta":{"content":"a","reasoning_content":null}}]}',  # other delta keys: parse_chunk
        b'{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":""}}]}}]}',
        b'{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}',  # no text to time
        b'{"choices":[{"text":"a","finish_reason":"length"}]}',  # a finish reason to record
        b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":3}}',  # usage to record
        b'{"choices":[],"usage":{"completion_tokens":3}}',
        b"[DONE]",
        b'{"choices":[{"text":"\xff"}]}',  # invalid UTF-8: the general path raises the decoder's error
    ):
        assert token_chunk(data, Api.CHAT if b"delta" in data else Api.COMPLETIONS) is None, data
