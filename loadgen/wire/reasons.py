"""What a failed answer says of itself, one bounded line: the server's reason, or the time it was given."""

from __future__ import annotations

import aiohttp
import httpx
import orjson

from loadgen.wire.sse import error_message

ERROR_BODY_BYTES = 4096  # how much of a failed answer's body is read for its reason
REASON_CHARS = 200  # the longest server reason kept


async def server_reason(response: httpx.Response) -> str:
    """``": <the server's message>"`` from a failed answer's body, one bounded line (or "").

    The OpenAI error shape's ``error.message`` (what a wrong model name or an
    oversized prompt is explained by), else the body's first line. Only the
    first few KiB are read, so a hostile error body cannot grow memory.
    """
    head = b""
    try:
        async for raw in response.aiter_bytes():
            head += raw
            if len(head) >= ERROR_BODY_BYTES:
                break
    except (httpx.HTTPError, aiohttp.ClientError, OSError):
        pass
    return failure_reason(head)


def failure_reason(head: bytes) -> str:
    """``": <the server's message>"`` from the first bytes of a failed answer (or "")."""
    text = head[:ERROR_BODY_BYTES].decode("utf-8", errors="replace")
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = None
    message = error_message(parsed) if isinstance(parsed, dict) else text
    line = " ".join(message.split())
    return f": {line[:REASON_CHARS]}" if line else ""


def timed_out(timeout_s: float) -> str:
    return f"no complete response within {timeout_s:g} s"
