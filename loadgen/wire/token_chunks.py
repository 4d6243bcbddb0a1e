"""The common chunk of a stream, recognised in one pass: one output token and nothing else to record.

``parse_chunk`` (``loadgen.wire.sse``) reads any chunk; most chunks of a stream are one token of one kind,
and both read paths (the Python connection's and the compiled reader's, ``fastread.pyx``) test for that
here first. A property test holds ``parse_chunk`` to reading every chunk accepted here the same way.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.api import Api
from loadgen.wire.sse import chunk_id

ANSWER, REASONING, TOOL_ARGUMENTS = 0, 1, 2  # what a token chunk carries (``token_chunk``'s kind)


def token_chunk(data: bytes, api: Api) -> tuple[str, int] | None:
    """The text and kind of a chunk that carries one output token and nothing else to record; else None.

    Most chunks of a stream are exactly that: one choice whose text (completions) or delta (chat; the
    delta holding nothing else but perhaps ``role``) is one non-empty string: the answer's ``content``
    (kind ``ANSWER``), a reasoning model's ``reasoning_content`` or ``reasoning`` (``REASONING``), or a
    tool call's next ``arguments`` (``TOOL_ARGUMENTS``: ``{"index", "function": {"arguments"}}`` alone); no
    finish reason, usage or error. Recognised here in one pass, such a chunk skips the general decoder
    and ``parse_chunk`` (2.5 us instead of 6 per chunk in isolation); anything else, invalid UTF-8 or
    JSON included, answers None and takes the general path, which decides. A property test checks that
    ``parse_chunk`` reads every chunk this accepts the same way.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return _token_text(obj, api)


def token_chunk_named(data: bytes, api: Api) -> tuple[str, int, str | None] | None:
    """``token_chunk`` with the chunk's id as ``parse_chunk`` reads it: a response's first token names it
    (``_StreamState.response_id``) without the general path."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    token = _token_text(obj, api)
    return None if token is None else (*token, chunk_id(obj))


def _token_text(obj: Any, api: Api) -> tuple[str, int] | None:
    if api is Api.RESPONSES:  # typed events (and an event: line before each): always the general path
        return None
    if type(obj) is not dict or obj.get("usage") is not None or "error" in obj:
        return None
    choices = obj.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None:
        return None
    if api == Api.COMPLETIONS:
        text = choice.get("text")
        return (text, ANSWER) if type(text) is str and text else None
    delta = choice.get("delta")
    if type(delta) is not dict or len(delta) - ("role" in delta) != 1:  # one key, with or without role
        return None
    for key, kind in (("content", ANSWER), ("reasoning_content", REASONING), ("reasoning", REASONING)):
        text = delta.get(key)
        if type(text) is str and text:
            return text, kind
    calls = delta.get("tool_calls")
    if type(calls) is not list or len(calls) != 1 or type(call := calls[0]) is not dict or len(call) != 2:
        return None
    function = call.get("function")
    if type(call.get("index")) is not int or type(function) is not dict or len(function) != 1:
        return None
    arguments = function.get("arguments")
    return (arguments, TOOL_ARGUMENTS) if type(arguments) is str and arguments else None
