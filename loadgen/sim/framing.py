"""OpenAI-shaped request parsing and SSE chunk framing for the simulator (pure).

Chunks mirror vLLM's streaming output: a first chunk with ``delta.role`` and
empty content (chat only), one chunk per token, ``finish_reason`` on the last
text chunk, a separate usage chunk with ``choices: []`` when
``stream_options.include_usage`` is set, then ``data: [DONE]``.

Prompt tokens are counted as whitespace-separated words of the prompt (chat:
of every message's text content), so ``usage`` is exact and reproducible
without a tokenizer. Output token ``i`` is the word ``WORDS[i % len(WORDS)]``
followed by a space.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.api import Api

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "again")
TOOL_NAME = "lookup"  # the function a simulated tool-call turn calls


class BadRequest(ValueError):
    """A request the OpenAI API would reject with 400."""

    status = 400


class UnknownModel(BadRequest):
    """A model the server does not serve: 404, as vLLM and OpenAI answer."""

    status = 404


@dataclass(frozen=True, slots=True, kw_only=True)
class SimRequest:
    api: Api
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    messages: tuple[Mapping[str, Any], ...] = ()  # chat: what was sent
    # the prompt's words in order (every message's text; an image is its tokens' worth of one word naming it):
    # what the prefix cache names its blocks by
    words: tuple[str, ...] = ()
    image_tokens: int = 0  # the prompt's tokens that are images (chat content parts; usage says them apart)
    cached_tokens: int = 0  # prompt tokens found in the prefix cache (no prefill; usage says so)
    # vLLM's stream_options.continuous_usage_stats: every chunk carries the usage so far
    continuous_usage: bool = False


def _content_words(content: Any, image_tokens: int) -> tuple[list[str], int]:
    """A message's words and its images. An image stands in the words as ``image_tokens`` copies of one word
    naming its URL, so two prompts share cached blocks only where they carry the same image."""
    if content is None:
        return [], 0
    if isinstance(content, str):
        return content.split(), 0
    if not isinstance(content, list):
        raise BadRequest("'content' must be a string or a list of content parts")
    words: list[str] = []
    images = 0
    for part in content:  # content parts: [{"type": "text", "text": ...}, {"type": "image_url", ...}]
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("image_url", "input_image"):  # chat's and the Responses API's
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str) or not url:
                raise BadRequest("an 'image_url' content part needs 'image_url': {'url': ...}")
            images += 1
            words += [f"<image:{hash(url):x}>"] * image_tokens
        elif isinstance(text := part.get("text", ""), str):
            words += text.split()
    return words, images


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """How the simulator counts a prompt: ``template + per_word * words`` (chat adds the template).

    One token per word by default, so usage is exact and reproducible; a real
    tokenizer's ratio (``--tokens-per-word 3.5 --template-tokens 10``) lets
    prompt calibration be tested against a known truth.
    """

    per_word: float = 1.0
    template: int = 0
    image_tokens: int = 0  # what one image in a chat message costs (a vision model's patch tokens)

    def count(self, words: int, api: Api) -> int:
        return round(self.per_word * words) + (self.template if api == "chat" else 0)


def json_object(body: bytes) -> dict[str, Any]:
    """A request body as the JSON object it must be, or ``BadRequest`` saying what it is instead."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("request body is not valid JSON") from None
    except RecursionError:
        raise BadRequest("request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


def parse_request(
    body: bytes,
    api: Api,
    default_model: str,
    default_max_tokens: int,
    max_model_len: int = 131_072,
    tokenizer: Tokenizer = Tokenizer(),
    adapters: tuple[str, ...] = (),
) -> SimRequest:
    """Validate a request body; raise ``BadRequest`` with an OpenAI-style message.

    Like a real engine, a request whose prompt and output exceed ``max_model_len`` is refused
    (otherwise ``max_tokens: 10**12`` would hold a slot forever).
    """
    data = json_object(body)
    messages: tuple[Mapping[str, Any], ...] = ()
    images = image_words = 0
    if api == "responses" and isinstance(data.get("input"), str):
        words = data["input"].split()
    elif api.messages:
        field = api.prompt_field
        listed = data.get(field)
        if not isinstance(listed, list) or not listed:
            raise BadRequest(
                f"'{field}' is required and must be a non-empty list" + (" or a string" if api == "responses" else "")
            )
        if not all(isinstance(m, dict) for m in listed):
            raise BadRequest(f"each entry of '{field}' must be an object")
        words = []
        for message in listed:
            said, shown = _content_words(message.get("content"), tokenizer.image_tokens)
            words += said
            images += shown
        image_words = images * tokenizer.image_tokens
        messages = tuple(listed)
    else:
        prompt = data.get("prompt")
        if isinstance(prompt, str):
            words = prompt.split()
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            words = [word for p in prompt for word in p.split()]
        else:
            raise BadRequest("'prompt' is required and must be a string or a list of strings")
    prompt_tokens = tokenizer.count(len(words) - image_words, api) + image_words
    max_tokens = data.get("max_completion_tokens", data.get(api.max_tokens_field, default_max_tokens))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"'max_tokens' must be an integer >= 1, got {max_tokens!r}")
    if prompt_tokens + max_tokens > max_model_len:
        raise BadRequest(
            f"this model's maximum context length is {max_model_len} tokens; the request asks for "
            f"{prompt_tokens} prompt + {max_tokens} output tokens"
        )
    stream = data.get("stream", False)
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object")
    model = data.get("model") or default_model
    if model != default_model and model not in adapters:
        raise UnknownModel(f"The model `{model}` does not exist.")
    return SimRequest(
        api=api,
        model=str(model),
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=bool(stream),
        include_usage=bool(options.get("include_usage", False)),
        continuous_usage=bool(options.get("continuous_usage_stats", False)),
        messages=messages,
        words=tuple(words),
        image_tokens=image_words,
    )


def output_text(start: int, n: int) -> str:
    """The text of output tokens ``start .. start+n-1``."""
    return "".join(WORDS[i % len(WORDS)] + " " for i in range(start, start + n))


class ChunkFramer:
    """Builds the SSE byte frames of one streamed response.

    The JSON envelope is serialised once per request; each token chunk is
    then a cheap string concatenation, so the simulator's own cost stays far
    below the rate it must sustain.
    """

    def __init__(self, req: SimRequest, request_id: str, created: int) -> None:
        self._req = req
        kind = "chat.completion.chunk" if req.api == "chat" else "text_completion"
        head = json.dumps({"id": request_id, "object": kind, "created": created, "model": req.model})
        self._head = head[:-1]  # without the closing brace
        if req.api == "chat":
            self._open, self._close = ',"choices":[{"index":0,"delta":{"content":', "}"
        else:
            self._open, self._close = ',"choices":[{"index":0,"text":', ""

    def role(self) -> bytes:
        """The chat role chunk (empty content); completions have none."""
        return self._frame(
            ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
        )

    def text(self, text: str, *, last: bool, so_far: int | None = None) -> bytes:
        """A text chunk; with ``so_far`` (the request asked for continuous usage), the usage to this chunk."""
        finish = '"length"' if last else "null"
        body = f'{self._open}{json.dumps(text)}{self._close},"logprobs":null,"finish_reason":{finish}}}]'
        if so_far is not None and self._req.continuous_usage:
            p = self._req.prompt_tokens
            body += f',"usage":{{"prompt_tokens":{p},"completion_tokens":{so_far},"total_tokens":{p + so_far}}}'
        return self._frame(body + "}")

    def reasoning(self, text: str) -> bytes:
        """A chat reasoning delta, as vLLM's reasoning parsers stream it (``reasoning_content``)."""
        return self._delta({"reasoning_content": text}, None)

    def tool_call(self, arguments: str, *, first: bool, last: bool) -> bytes:
        """A chat tool-call delta: the call's id and name first, then its arguments piece by piece."""
        call: dict[str, Any] = {"index": 0, "function": {"arguments": arguments}}
        if first:
            call = {"index": 0, "id": f"call_{self._req.model}", "type": "function",
                    "function": {"name": TOOL_NAME, "arguments": arguments}}  # fmt: skip
        return self._delta({"tool_calls": [call]}, "tool_calls" if last else None)

    def _delta(self, delta: dict[str, Any], finish: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return self._frame(f',"choices":[{json.dumps(choice)}]}}')

    def closing(self, completion_tokens: int, reasoning_tokens: int) -> bytes:
        """What ends the stream: the usage chunk where it was asked for, then ``[DONE]``."""
        usage = self.usage(completion_tokens, reasoning_tokens) if self._req.include_usage else b""
        return usage + self.DONE

    def usage(self, completion_tokens: int, reasoning_tokens: int = 0) -> bytes:
        p, cached, image = self._req.prompt_tokens, self._req.cached_tokens, self._req.image_tokens
        prompt_details = [f'"cached_tokens":{cached}'] * bool(cached) + [f'"image_tokens":{image}'] * bool(image)
        details = f',"prompt_tokens_details":{{{",".join(prompt_details)}}}' if prompt_details else ""
        if reasoning_tokens:
            details += f',"completion_tokens_details":{{"reasoning_tokens":{reasoning_tokens}}}'
        return self._frame(
            f',"choices":[],"usage":{{"prompt_tokens":{p},"completion_tokens":{completion_tokens},'
            f'"total_tokens":{p + completion_tokens}{details}}}}}'
        )

    def _frame(self, tail: str) -> bytes:
        return f"data: {self._head}{tail}\n\n".encode()

    DONE = b"data: [DONE]\n\n"
    MALFORMED = b'data: {"id": "broken", "choices": [\n\n'


class ResponsesFramer:
    """The Responses API's typed events (``event:`` and ``data:`` lines, the type in both), with the same
    methods as ``ChunkFramer``: a text, reasoning or tool-call arguments delta per token group, and
    ``response.completed`` with the usage to end it (no ``[DONE]``)."""

    def __init__(self, req: SimRequest, request_id: str, created: int) -> None:
        self._req, self._id, self._created = req, request_id, created

    def role(self) -> bytes:
        return self._event("response.created", response=self._response("in_progress"))

    def text(self, text: str, *, last: bool, so_far: int | None = None) -> bytes:
        return self._event("response.output_text.delta", item_id=f"msg_{self._id}", output_index=0, delta=text)

    def reasoning(self, text: str) -> bytes:
        return self._event("response.reasoning_text.delta", item_id=f"rs_{self._id}", output_index=0, delta=text)

    def tool_call(self, arguments: str, *, first: bool, last: bool) -> bytes:
        return self._event(
            "response.function_call_arguments.delta", item_id=f"fc_{self._id}", output_index=0, delta=arguments
        )

    def closing(self, completion_tokens: int, reasoning_tokens: int) -> bytes:
        p = self._req.prompt_tokens
        usage = {
            "input_tokens": p,
            "input_tokens_details": {"cached_tokens": self._req.cached_tokens},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": p + completion_tokens,
        }
        return self._event("response.completed", response={**self._response("completed"), "usage": usage})

    def _response(self, status: str) -> dict[str, Any]:
        return {"id": self._id, "object": "response", "created_at": self._created, "model": self._req.model,
                "status": status}  # fmt: skip

    @staticmethod
    def _event(kind: str, **fields: Any) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


def completion_body(req: SimRequest, request_id: str, created: int) -> dict[str, Any]:
    """The non-streaming response object."""
    text = output_text(0, req.max_tokens)
    if req.api == "responses":
        message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        return {
            "id": request_id,
            "object": "response",
            "created_at": created,
            "model": req.model,
            "status": "completed",
            "output": [message],
            "usage": {
                "input_tokens": req.prompt_tokens,
                "output_tokens": req.max_tokens,
                "total_tokens": req.prompt_tokens + req.max_tokens,
            },
        }
    choice: dict[str, Any]
    if req.api == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
        kind = "text_completion"
    return {
        "id": request_id,
        "object": kind,
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": req.prompt_tokens,
            "completion_tokens": req.max_tokens,
            "total_tokens": req.prompt_tokens + req.max_tokens,
        },
    }


def error_body(message: str, code: int) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 401: "authentication_error"}.get(code, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
