"""Sans-IO server-sent events: bytes in, events out; plus OpenAI chunk parsing.

``SSEDecoder.feed`` accepts the body in arbitrary pieces: lines may be split
anywhere, including inside a multi-byte UTF-8 character or between the
``\\r`` and ``\\n`` of a CRLF. Comment lines (``:`` first, used as pings)
are skipped; several ``data:`` lines of one event are joined with ``\\n``
(the WHATWG event-stream rules).
"""

from __future__ import annotations

import codecs
import re
from enum import StrEnum
from typing import Any, NamedTuple

import orjson

from loadgen.api import Api
from loadgen.limits import MAX_EVENT_CHARS

DONE = "[DONE]"
_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEError(ValueError):
    """The byte stream is not a valid event stream (e.g. invalid UTF-8)."""


class MalformedChunk(ValueError):
    """An event's data is not an OpenAI streaming chunk."""


class SSEEvent(NamedTuple):
    """One dispatched event. A NamedTuple, not a frozen dataclass: one is built per
    streamed chunk, and a frozen dataclass costs several times more to construct."""

    data: str
    event: str = "message"


_UTF8_DECODER = codecs.getincrementaldecoder("utf-8")  # looked up once: a decoder is made per request


_BOM = b"\xef\xbb\xbf"  # U+FEFF in UTF-8


class SSEDecoder:
    """Incremental event-stream decoder, bounded in memory.

    It keeps only the unparsed tail (an unfinished line) and the current
    event's data lines; either growing past ``max_event_chars`` raises
    ``SSEError``, so a server that streams ``data:`` lines without ever ending
    the event, or one endless line, fails that request instead of growing
    the generator without bound.
    """

    __slots__ = ("_buf", "_data", "_data_chars", "_event", "_lead", "_pending_cr", "_started", "_utf8", "idle", "limit")

    def __init__(self, max_event_chars: int = MAX_EVENT_CHARS) -> None:
        self._utf8 = _UTF8_DECODER("strict")
        self._buf = ""
        self._data: list[str] = []
        self._data_chars = 0  # characters held in _data (the event being assembled)
        self._event = ""
        self._pending_cr = False  # last piece ended in "\r": a "\n" may follow
        self.limit = max_event_chars  # the longest line or event, in characters
        self.idle = True  # nothing held between feeds: a piece that is one whole event needs no split
        self._started = False  # past the stream's first bytes (the standard strips one leading BOM)
        self._lead = b""  # the stream's first bytes while they may still be a BOM split across pieces

    @property
    def buffered_chars(self) -> int:
        """What the decoder holds between feeds: the unfinished line and the event being assembled."""
        return len(self._buf) + self._data_chars

    def whole_event(self, chunk: bytes) -> bool:
        """Whether ``chunk`` is exactly one ``data: ...\\n\\n`` event (one line, no CR, within the
        limit) with nothing held before it: then its data is ``chunk[6:-2]``, as ``feed`` would give.

        The hot path: servers write one such event per chunk, and a socket read or an HTTP chunk
        usually carries exactly one, which needs none of the incremental decoding below.
        """
        n = len(chunk)
        return (
            self.idle
            and chunk.startswith(b"data: ")
            and chunk.endswith(b"\n\n")
            and chunk.find(b"\n") == n - 2
            and chunk.find(b"\r") < 0
            and n - 8 <= self.limit
        )

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not self._started:
            lead = self._lead + chunk
            if len(lead) < len(_BOM) and _BOM.startswith(lead):  # a BOM's first bytes, or nothing yet
                self._lead, self.idle = lead, not lead
                return []
            self._started, self._lead = True, b""
            chunk = lead[len(_BOM) :] if lead.startswith(_BOM) else lead  # the standard strips one leading BOM
        if self.whole_event(chunk):
            try:
                return [SSEEvent(chunk[6:-2].decode())]
            except UnicodeDecodeError as exc:
                raise SSEError(f"invalid UTF-8 in event stream: {exc.reason}") from None
        if (events := self._whole_events(chunk)) is not None:
            return events
        events = self._feed(chunk)
        self.idle = not (self._buf or self._data or self._event or self._pending_cr) and not self._utf8.getstate()[0]
        return events

    def _whole_events(self, chunk: bytes) -> list[SSEEvent] | None:
        """The events of a piece that is only whole ``data: ...\\n\\n`` events, one line each, no CR, with
        nothing held before it (a stream's last piece: the usage chunk and [DONE]); None: anything else,
        for the incremental path, which would read such a piece the same way line by line."""
        if not (self.idle and chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") and b"\r" not in chunk):
            return None
        try:
            text = chunk.decode()
        except UnicodeDecodeError as exc:
            raise SSEError(f"invalid UTF-8 in event stream: {exc.reason}") from None
        parts = text[:-2].split("\n\n")
        if any(not part.startswith("data: ") or "\n" in part for part in parts):
            return None
        return [SSEEvent(part[6:]) for part in parts]

    def _feed(self, chunk: bytes) -> list[SSEEvent]:
        try:
            text = self._utf8.decode(chunk)
        except UnicodeDecodeError as exc:
            raise SSEError(f"invalid UTF-8 in event stream: {exc.reason}") from None
        if not text:
            return []  # only part of a UTF-8 character so far
        if self._pending_cr and text[0] == "\n":
            text = text[1:]
        self._pending_cr = text.endswith("\r")
        self._buf += text
        if "\n" not in text and "\r" not in text:  # no line ended: nothing to split (and no re-split)
            if len(self._buf) > self.limit:
                raise SSEError(f"an event-stream line exceeds {self.limit:,} characters")
            return []
        # Only CR, LF and CRLF end lines (str.splitlines would also split on U+2028 etc.).
        lines = _LINE_END.split(self._buf) if "\r" in self._buf else self._buf.split("\n")
        self._buf = lines.pop()
        events: list[SSEEvent] = []
        data = self._data
        for line in lines:
            if line.startswith("data: "):  # the hot path: one OpenAI chunk per data line...
                data.append(line[6:])
                self._data_chars += len(line) - 6
            elif not line and len(data) == 1 and not self._event:  # ...ended by a blank line
                events.append(SSEEvent(data[0]))
                data.clear()
                self._data_chars = 0
            else:
                self._line(line, events)
                data = self._data
        if self._data_chars > self.limit or len(self._buf) > self.limit:
            raise SSEError(f"an event-stream event exceeds {self.limit:,} characters without ending")
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream. Lenient where the spec is strict: a last line without its
        line break, and a last event without its blank line, still count (some
        servers end with ``data: [DONE]\n``)."""
        try:
            tail = self._utf8.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise SSEError(f"event stream ends inside a UTF-8 character: {exc.reason}") from None
        events: list[SSEEvent] = []
        rest = self._buf + tail
        self._buf = ""
        if rest:
            self._line(rest, events)
        self._line("", events)
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(SSEEvent("\n".join(self._data), self._event or "message"))
            self._data, self._event, self._data_chars = [], "", 0
            return
        if line[0] == ":":
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_chars += len(value)
        elif name == "event":
            self._event = value
        # "id" and "retry" carry nothing a load test needs.


class Chunk(NamedTuple):
    """What one OpenAI streaming chunk tells us (a NamedTuple for the same reason as SSEEvent).

    Built by name only: every field has a default, so a chunk says only what it carries, and a field
    added later cannot be dropped by a positional call that stops one short (``image_tokens`` once was).
    """

    text: str = ""  # output text carried (content, or reasoning deltas); "" if none
    finish_reason: str | None = None
    completion_tokens: int | None = None  # usage.completion_tokens, when the chunk has usage
    prompt_tokens: int | None = None
    error: str | None = None  # an in-stream {"error": ...} object
    token: bool = False  # a token event: a delta for an output token, even one with empty text
    id: str | None = None  # the response's id (chatcmpl-...), to find the request in the server's logs
    reasoning: bool = False  # a token event of reasoning alone: no answer text and no tool call in it
    tool_call: bool = False  # the delta carries a tool call (its name or arguments)
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens, when sent
    image_tokens: int | None = None  # usage.prompt_tokens_details.image_tokens, where a server says them apart


ID_CHARS = 128  # a response id longer than this is cut: it is for finding a request in logs, not storage


class Convention(StrEnum):
    TOKENS = "tokens"
    TEXT = "text"


"""Which chunks time the stream (``--metric-convention``).

``tokens`` (default): every token event (docs/design.md): a chunk carrying a
choice delta for an output token, including vLLM's empty-content chunks for
a token that does not yet decode to complete text; the role-only first
chunk is not one. ``text``: only chunks carrying text, as some tools do;
each held-back token then merges two engine steps into one gap. Results
record which, and comparisons never mix them.
"""


def error_message(obj: dict[str, Any]) -> str:
    """The server's words in an OpenAI error object: ``error.message``, or ``error`` when it is a string."""
    err = obj.get("error", "")
    return str(err.get("message", "") if isinstance(err, dict) else err)


def parse_chunk(data: str, api: Api) -> Chunk:
    """Parse one event's data. Raises ``MalformedChunk`` when it is not a chunk.

    Reasoning deltas (``reasoning_content`` / ``reasoning``) count as output
    text and as token events (TTFT is the first token of any kind: the model is working), and are
    marked ``reasoning`` where the delta holds nothing else, so the first *answer* token (content or a
    tool call) is timed apart: the time to first output token. A ``tool_calls`` delta is a token event.
    """
    try:
        obj = orjson.loads(data)  # C parser: JSON decoding was the client's largest cost per chunk
    except orjson.JSONDecodeError:
        raise MalformedChunk("chunk data is not JSON") from None
    if not isinstance(obj, dict):
        raise MalformedChunk("chunk data is not a JSON object")
    if api is Api.RESPONSES:
        return _response_event(obj)
    if "choices" not in obj and "error" in obj:
        return Chunk(error=error_message(obj)[:200])
    cid = chunk_id(obj)
    choices = obj.get("choices")
    if not isinstance(choices, list):
        raise MalformedChunk("chunk has no 'choices' list")
    usage = obj.get("usage")
    completion = prompt = reasoning_tokens = image_tokens = None
    if isinstance(usage, dict):
        completion = _int_or_none(usage.get("completion_tokens"))
        prompt = _int_or_none(usage.get("prompt_tokens"))
        details = usage.get("completion_tokens_details")
        if isinstance(details, dict):
            reasoning_tokens = _int_or_none(details.get("reasoning_tokens"))
        image_tokens = _image_tokens(usage.get("prompt_tokens_details"))
    if not choices:
        return Chunk(
            completion_tokens=completion,
            prompt_tokens=prompt,
            id=cid,
            reasoning_tokens=reasoning_tokens,
            image_tokens=image_tokens,
        )
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedChunk("chunk choice is not an object")
    text, token, reasoning, tool = _choice_text(choice, api)
    finish = choice.get("finish_reason")
    finish = finish if isinstance(finish, str) else None
    return Chunk(
        text=text,
        finish_reason=finish,
        completion_tokens=completion,
        prompt_tokens=prompt,
        token=token,
        id=cid,
        reasoning=reasoning,
        tool_call=tool,
        reasoning_tokens=reasoning_tokens,
        image_tokens=image_tokens,
    )


RESPONSE_TEXT = "response.output_text.delta"
RESPONSE_REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
RESPONSE_TOOL = "response.function_call_arguments.delta"
RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete"})  # incomplete: max_output_tokens reached
RESPONSE_FAILS = frozenset({"response.failed", "error"})


def _response_event(obj: dict[str, Any]) -> Chunk:
    """One typed event of the Responses API (``/v1/responses``) as a chunk: a text, reasoning or tool-call
    arguments delta is a token event; ``response.completed`` (or ``incomplete``, at ``max_output_tokens``)
    ends the answer with its usage; ``response.failed`` and ``error`` are in-stream errors. Every other
    type (created, in_progress, output_item.added, ...) carries nothing to time."""
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise MalformedChunk("Responses event has no 'type'")
    delta = obj.get("delta")
    text = delta if type(delta) is str else ""
    if kind == RESPONSE_TEXT:
        return Chunk(text=text, token=True)
    if kind in RESPONSE_REASONING:
        return Chunk(text=text, token=True, reasoning=True)
    if kind == RESPONSE_TOOL:
        return Chunk(token=True, tool_call=True)
    response = obj.get("response")
    response = response if isinstance(response, dict) else {}
    rid = response.get("id")
    rid = rid[:ID_CHARS] if isinstance(rid, str) else None
    if kind in RESPONSE_FAILS:
        failure = response.get("error") if kind == "response.failed" else obj
        message = failure.get("message") if isinstance(failure, dict) else None
        return Chunk(error=str(message or kind)[:200], id=rid)
    if kind in RESPONSE_ENDS:
        usage = response.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        details = usage.get("output_tokens_details")
        reasoning = _int_or_none(details.get("reasoning_tokens")) if isinstance(details, dict) else None
        output, prompt = _int_or_none(usage.get("output_tokens")), _int_or_none(usage.get("input_tokens"))
        images = _image_tokens(usage.get("input_tokens_details"))
        return Chunk(
            finish_reason=kind.removeprefix("response."),
            completion_tokens=output,
            prompt_tokens=prompt,
            id=rid,
            reasoning_tokens=reasoning,
            image_tokens=images,
        )
    return Chunk(id=rid)


def _image_tokens(details: Any) -> int | None:
    """The prompt's image tokens from usage's prompt (or input) token details, where the server sends them."""
    return _int_or_none(details.get("image_tokens")) if isinstance(details, dict) else None


def chunk_id(obj: dict[str, Any]) -> str | None:
    """The response id a chunk names, as the general path and the fast one both keep it (cut to ``ID_CHARS``)."""
    cid = obj.get("id")
    return cid[:ID_CHARS] if isinstance(cid, str) else None


def _choice_text(choice: dict[str, Any], api: Api) -> tuple[str, bool, bool, bool]:
    """The output text of a choice; whether it is a token event (see ``Convention``); whether that event
    is reasoning alone; whether it carries a tool call."""
    if api == Api.COMPLETIONS:
        text = choice.get("text")
        return (text, True, False, False) if isinstance(text, str) else ("", False, False, False)
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        raise MalformedChunk("chat chunk has no 'delta' object")
    content = delta.get("content")
    text = content if type(content) is str else ""
    token = type(content) is str and (text != "" or "role" not in delta)  # the role chunk is no token
    reasoned = tool = False
    if len(delta) > ("content" in delta) + ("role" in delta):  # keys beyond role/content: reasoning, tools
        for key in ("reasoning_content", "reasoning"):
            extra = delta.get(key)
            if type(extra) is str:
                text += extra
                token = reasoned = True
        calls = delta.get("tool_calls")
        if type(calls) is list and calls:
            token = tool = True
    return text, token, reasoned and not content and not tool, tool


def _int_or_none(value: Any) -> int | None:
    """A token count as the server reported it; a negative or non-integer one is no count at all."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
