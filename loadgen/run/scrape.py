"""Polls the target's Prometheus endpoint during a level's window for the server's own batch size and the
tokens it counted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from loadgen.level.server_sample import ServerSample
from loadgen.run.promtext import Timed, read_gauges
from loadgen.wire.control import OversizedBody, get_capped
from loadgen.wire.target import split_endpoint


def metrics_url(base_url: str) -> str:
    """``/metrics`` sits at the server root, beside ``/v1`` (no user info or query: the client adds those)."""
    root = split_endpoint(base_url).base_url.rstrip("/")
    return (root.removesuffix("/v1") or root) + "/metrics"


METRICS_MAX_BYTES = 16 << 20  # a /metrics page is tens of KB; vLLM's with many LoRA adapters a few MB


async def probe(http: httpx.AsyncClient, url: str) -> bool:
    """Whether the target exposes gauges we know (auto-enables scraping)."""
    try:
        response = await get_capped(http, url, timeout_s=5.0, max_bytes=METRICS_MAX_BYTES)
    except (httpx.HTTPError, OversizedBody):
        return False
    return response.status_code == 200 and read_gauges(response.text) is not None


class MetricsScraper:
    """Samples running/waiting gauges every ``interval_s`` inside ``[start, end]``."""

    def __init__(self, http: httpx.AsyncClient, url: str, *, interval_s: float = 0.2) -> None:
        self._http = http
        self._url = url
        self._interval_s = interval_s
        self._source = ""
        self._running: list[float] = []
        self._waiting: list[float] = []
        self._kv: list[float] = []
        self._counters: list[tuple[float, float | None, float | None]] = []  # (time, prompt, generation)
        self._cache: list[tuple[float | None, float | None]] = []  # prefix cache (queried, hit) tokens per scrape
        self._timed: list[tuple[Timed | None, Timed | None]] = []  # (queue, prefill) per scrape
        self._kv_capacity: float | None = None  # the KV cache's size, as the latest scrape said it
        self._spec: list[tuple[float | None, float | None]] = []  # speculative (draft, accepted) tokens per scrape
        self.failures = 0

    async def run(self, start: float, end: Callable[[], float], clock: Callable[[], float]) -> None:
        """Poll inside the window until cancelled (the level's end cancels it). Past ``end()`` it waits rather
        than returns: a request floor moves the end only when the next request completes after it, up to a
        request's lifetime later, and a scraper gone by then covered only the planned part of the window
        (vLLM's CPU build at one client: 7.9 s of a 25.6 s window)."""
        await asyncio.sleep(max(0.0, start - clock()))
        while True:
            if clock() >= end():
                await asyncio.sleep(self._interval_s)
                continue
            try:
                response = await get_capped(self._http, self._url, timeout_s=5.0, max_bytes=METRICS_MAX_BYTES)
                gauges = read_gauges(response.text) if response.status_code == 200 else None
            except (httpx.HTTPError, OversizedBody):
                gauges = None
            if gauges is None:
                self.failures += 1
            else:
                self._source = gauges.source
                self._running.append(gauges.running)
                self._waiting.append(gauges.waiting)
                if gauges.kv_usage is not None:
                    self._kv.append(gauges.kv_usage)
                self._counters.append((clock(), gauges.prompt_tokens, gauges.generation_tokens))
                self._timed.append((gauges.queue, gauges.prefill))
                self._cache.append((gauges.cache_queries, gauges.cache_hits))
                self._kv_capacity = gauges.kv_capacity_tokens or self._kv_capacity
                self._spec.append((gauges.spec_draft, gauges.spec_accepted))
            await asyncio.sleep(self._interval_s)

    def sample(self) -> ServerSample | None:
        if not self._running:
            return None
        n = len(self._running)
        return ServerSample(
            source=self._source,
            samples=n,
            running_mean=sum(self._running) / n,
            waiting_mean=sum(self._waiting) / n,
            kv_usage_mean=sum(self._kv) / len(self._kv) if self._kv else None,
            counted_s=self._counters[-1][0] - self._counters[0][0] if len(self._counters) > 1 else None,
            prompt_tokens=_delta([c[1] for c in self._counters]),
            generation_tokens=_delta([c[2] for c in self._counters]),
            queue_ms_mean=_mean_ms([t[0] for t in self._timed]),
            prefill_ms_mean=_mean_ms([t[1] for t in self._timed]),
            prefill_requests=_delta([t[1].count if t[1] is not None else None for t in self._timed]),
            prefix_cache_queried=_delta([c[0] for c in self._cache]),
            prefix_cache_hits=_delta([c[1] for c in self._cache]),
            kv_capacity_tokens=self._kv_capacity,
            spec_draft_tokens=_delta([s[0] for s in self._spec]),
            spec_accepted_tokens=_delta([s[1] for s in self._spec]),
        )


def _delta(values: list[float | None]) -> float | None:
    """What a counter counted between the first and the last scrape (None: absent, or reset meanwhile)."""
    if len(values) < 2 or values[0] is None or values[-1] is None or values[-1] < values[0]:
        return None
    return values[-1] - values[0]


def _mean_ms(totals: list[Timed | None]) -> float | None:
    """A per-request histogram's mean between the first and the last scrape, in ms (None: absent, reset,
    or no request counted meanwhile)."""
    seconds = _delta([t.seconds if t is not None else None for t in totals])
    count = _delta([t.count if t is not None else None for t in totals])
    return seconds / count * 1000.0 if seconds is not None and count else None
