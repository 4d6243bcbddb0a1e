"""One pooling request (embeddings, rerank): a batch of inputs out, one JSON body back, timed at its ends.

Nothing streams, so there is no first token: the record's latency is the
request's (sent to the answer's last byte), its ``inputs`` the batch the
answer accounted for, its ``prompt_tokens`` the server's usage. An answer
that scores or embeds a different number of inputs than were sent is a
malformed answer, not a success: a server that drops half a batch must not
look twice as fast. Failures are data, as for a stream (``ErrorKind``).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import orjson

from loadgen.api import Api
from loadgen.errors import ErrorKind, error_kind_for_status
from loadgen.limits import MAX_POOLED_BODY_BYTES
from loadgen.wire.client import WiredClient
from loadgen.wire.reasons import ERROR_BODY_BYTES, failure_reason, timed_out
from loadgen.wire.records import Clock, RequestRecord


async def pooled_request(
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
    request_id_header: str | None = None,
    on_cut: Callable[[RequestRecord], None] | None = None,
) -> RequestRecord:
    """Send one pooling request of ``inputs`` inputs and time its answer (see the module's docstring)."""
    tag = (request_id_header, os.urandom(16).hex()) if request_id_header else None
    answer = _Answer(api, inputs)
    t_sent = clock()
    try:
        if isinstance(http, WiredClient):
            wire_bytes = http.serialise_post(path, body, tag)
            t_sent = clock()
            if not await http.wire.post(wire_bytes, answer, timeout_s):
                answer.failure = ErrorKind.TIMEOUT, timed_out(timeout_s)
        else:
            await _over_httpx(http, path, body, tag, answer, timeout_s)
    except asyncio.CancelledError:
        if on_cut is not None:
            on_cut(answer.record(t_intended, t_slot, t_sent, clock(), tag, cut=True))
        raise
    return answer.record(t_intended, t_slot, t_sent, clock(), tag)


async def _over_httpx(
    http: httpx.AsyncClient,
    path: str,
    body: bytes,
    tag: tuple[str, str] | None,
    answer: _Answer,
    timeout_s: float,
) -> None:
    headers = {"content-type": "application/json", **(dict([tag]) if tag else {})}
    try:
        async with asyncio.timeout(timeout_s):
            async with http.stream("POST", path, content=body, headers=headers) as response:
                if answer.on_response(response.status_code, response.headers.get("content-type", "")):
                    async for raw in response.aiter_raw():
                        if not answer.on_body(raw):
                            break
                answer.on_end(None, None)
    except TimeoutError:
        answer.failure = ErrorKind.TIMEOUT, timed_out(timeout_s)
    except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:
        answer.on_end(ErrorKind.STREAM_BROKEN if answer.status else ErrorKind.CONNECT, type(exc).__name__)


class _Answer:
    """A pooling answer's bytes, gathered up to a bound, and what they say once whole (an ``Exchange``)."""

    __slots__ = ("api", "body", "failure", "inputs", "prompt_tokens", "response_id", "sent", "status")

    def __init__(self, api: Api, sent: int) -> None:
        self.api, self.sent = api, sent
        self.status: int | None = None
        self.body = bytearray()
        self.failure: tuple[ErrorKind, str] | None = None
        self.inputs = 0
        self.prompt_tokens: int | None = None
        self.response_id: str | None = None

    def on_response(self, status: int, content_type: str) -> bool:
        self.status = status
        if status < 400 and content_type and "json" not in content_type:
            self.failure = ErrorKind.MALFORMED_CHUNK, f"{content_type.split(';')[0][:60]} body, not JSON"
            return False
        return True

    def lane(self) -> tuple[Any, ...] | None:
        return None  # the compiled reader times streamed tokens; a pooled answer is read whole

    def on_body(self, data: bytes, tested: bool = False) -> bool:
        self.body += data
        limit = ERROR_BODY_BYTES if self.failed_status else MAX_POOLED_BODY_BYTES
        if len(self.body) <= limit:
            return True
        if not self.failed_status:
            self.failure = ErrorKind.PROTOCOL, f"answer over {MAX_POOLED_BODY_BYTES >> 20} MiB"
        return False

    @property
    def failed_status(self) -> bool:
        return self.status is not None and self.status >= 400

    def on_end(self, kind: ErrorKind | None, detail: str | None) -> None:
        if self.failure is not None or self.failed_status:
            return
        if kind is not None:
            self.failure = kind, detail or kind.value
            return
        self.failure = self._read()

    def _read(self) -> tuple[ErrorKind, str] | None:
        """The whole answer: how many inputs it answered and its usage; a failure when it is not the batch's."""
        try:
            obj = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return ErrorKind.MALFORMED_CHUNK, "answer is not JSON"
        if not isinstance(obj, dict):
            return ErrorKind.MALFORMED_CHUNK, "answer is not a JSON object"
        if "error" in obj and not ("data" in obj or "results" in obj):
            return ErrorKind.STREAM_BROKEN, f"server error{failure_reason(bytes(self.body[:ERROR_BODY_BYTES]))}"
        items = obj.get("results" if self.api is Api.RERANK else "data")
        if not isinstance(items, list):
            return ErrorKind.MALFORMED_CHUNK, f"answer has no {'results' if self.api is Api.RERANK else 'data'} list"
        self.inputs = len(items)
        rid = obj.get("id")
        self.response_id = rid[:128] if isinstance(rid, str) else None
        usage = obj.get("usage")
        if isinstance(usage, dict):
            tokens = usage.get("prompt_tokens", usage.get("total_tokens"))
            self.prompt_tokens = tokens if isinstance(tokens, int) and tokens >= 0 else None
        if self.inputs != self.sent:
            return ErrorKind.MALFORMED_CHUNK, f"answered {self.inputs} of the {self.sent} inputs sent"
        problem = _reranked(items, self.sent) if self.api is Api.RERANK else _embedded(items)
        return None if problem is None else (ErrorKind.MALFORMED_CHUNK, problem)

    def record(
        self,
        t_intended: float,
        t_slot: float | None,
        t_sent: float,
        t_done: float,
        tag: tuple[str, str] | None,
        cut: bool = False,
    ) -> RequestRecord:
        error, detail = self.failure if self.failure is not None else (None, None)
        if error is None and self.failed_status and not cut:
            status = self.status or 0
            error, detail = error_kind_for_status(status), f"HTTP {status}{failure_reason(bytes(self.body))}"
        ok = error is None and not cut
        return RequestRecord(
            t_intended=t_intended,
            t_slot=t_slot,
            t_sent=t_sent,
            t_first=None,
            t_last=None,
            t_done=t_done,
            chunk_times=(),
            chunk_tokens=None,
            output_tokens=0,
            output_tokens_estimated=False,
            prompt_tokens=self.prompt_tokens if ok else None,
            error=None if cut else error,
            http_status=self.status,
            error_detail=None if cut else detail,
            request_id=tag[1] if tag else None,
            response_id=self.response_id,
            cut=cut,
            inputs=self.inputs if ok else 0,
        )


def _reranked(items: list[Any], sent: int) -> str | None:
    """Why a rerank answer's results are not one score for each document sent (None: they are)."""
    seen: set[int] = set()
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("relevance_score") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < sent or index in seen:
            return f"a result's index ({str(index)[:20]}) names none of the {sent} documents, or one twice"
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            return f"document {index}'s relevance_score is not a number"
        seen.add(index)
    return None


def _embedded(items: list[Any]) -> str | None:
    """Why an embeddings answer is not one vector of one length for each input (None: it is); a vector is a
    list of numbers or, as asked, base64 (its length in characters compared)."""
    lengths = set()
    for item in items:
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(vector, list | str) or not vector:
            return "an input has no embedding"
        lengths.add(len(vector))
    return None if len(lengths) <= 1 else f"embeddings of {len(lengths)} different lengths in one answer"
