"""Control requests (``/models``, ``/metrics``): a GET whose body is capped and whose whole exchange is timed.

A hostile or broken server once streamed an endless ``/models`` to 2.16 GB
in 4.4 s: httpx reads a body whole, and its timeout is per read, not per
answer. These answers are a few KB; past ``max_bytes`` the answer is refused.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx


class OversizedBody(Exception):
    """The answer's body went past the cap: not what this endpoint sends."""


@dataclass(frozen=True, slots=True)
class ControlAnswer:
    status_code: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


CONNECT_TIMEOUT_S = 10.0  # a connection and its TLS handshake; a plain-HTTP port asked for TLS never answers


async def get_capped(http: httpx.AsyncClient, url: str, *, timeout_s: float, max_bytes: int) -> ControlAnswer:
    """GET ``url``; raises ``OversizedBody`` past ``max_bytes``, ``httpx.TimeoutException`` past ``timeout_s``
    for the whole exchange (``httpx.ConnectTimeout`` past ``CONNECT_TIMEOUT_S`` for the connection and its
    TLS handshake), or another ``httpx.HTTPError``."""
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
    try:
        async with asyncio.timeout(timeout_s):
            async with http.stream("GET", url, timeout=timeout) as response:
                chunks, size = [], 0
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > max_bytes:
                        raise OversizedBody(f"{url}: the answer goes past {max_bytes >> 20} MiB")
                    chunks.append(chunk)
                return ControlAnswer(response.status_code, b"".join(chunks))
    except TimeoutError:
        raise httpx.ReadTimeout(f"{url}: no whole answer within {timeout_s:g} s") from None
