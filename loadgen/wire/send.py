"""The one door every request goes out by: a streamed generation or a pooling batch, by what was prepared."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from loadgen.api import Api
from loadgen.limits import MAX_EVENT_CHARS
from loadgen.wire.client import stream_request
from loadgen.wire.pooled import pooled_request
from loadgen.wire.records import Clock, RequestRecord
from loadgen.wire.sse import Convention


async def send_request(
    http: httpx.AsyncClient,
    path: str,
    body: bytes,
    api: Api,
    inputs: int,
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
    """``inputs`` > 0: a pooling request of that many inputs (``pooled_request``); else a stream
    (``stream_request``, whose docstring says the rest)."""
    if inputs:
        return await pooled_request(
            http,
            path,
            body,
            api,
            inputs,
            t_intended=t_intended,
            t_slot=t_slot,
            clock=clock,
            timeout_s=timeout_s,
            request_id_header=request_id_header,
            on_cut=on_cut,
        )
    return await stream_request(
        http,
        path,
        body,
        api,
        t_intended=t_intended,
        t_slot=t_slot,
        clock=clock,
        timeout_s=timeout_s,
        convention=convention,
        max_event_chars=max_event_chars,
        request_id_header=request_id_header,
        answer=answer,
        on_cut=on_cut,
        max_tokens=max_tokens,
    )
