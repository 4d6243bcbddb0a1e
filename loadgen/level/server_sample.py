"""The server's own gauges over a level's window, as its Prometheus endpoint said them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSample:
    """The server's own gauges, scraped from its Prometheus endpoint during the window.

    Stored field by field under the field's own name (``to_json`` / ``from_json`` derive from the fields), so a
    new gauge is one line here; a file written before it reads it as None (not exported)."""

    source: str  # which naming scheme matched: vllm, sglang, tgi, loadgen_sim
    samples: int
    running_mean: float | None
    waiting_mean: float | None
    kv_usage_mean: float | None = None
    counted_s: float | None = None  # between the first and the last scrape: the counters' span
    prompt_tokens: float | None = None  # prompt tokens the server counted in that span (None: no counter)
    generation_tokens: float | None = None  # tokens it generated in that span
    # the server's own per-request means over that span (vLLM's request_queue_time / request_prefill_time):
    # waiting for a batch slot, and from admission to the first token; None where it exports neither
    queue_ms_mean: float | None = None
    prefill_ms_mean: float | None = None
    prefill_requests: float | None = None  # requests the prefill mean is over
    # prompt tokens looked up in the server's prefix cache over that span, and found there (None: not exported)
    prefix_cache_queried: float | None = None
    prefix_cache_hits: float | None = None
    kv_capacity_tokens: float | None = None  # the KV cache's size, as the server's /metrics says it (vLLM's)
    # speculative decoding over the window: draft tokens the server proposed, and those it accepted
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None

    @property
    def spec_acceptance(self) -> float | None:
        """The share of draft tokens the server accepted over the window (None: it counts none, or counts it
        cannot have: more accepted than drafted, or fewer than none)."""
        if not self.spec_draft_tokens or self.spec_accepted_tokens is None:
            return None
        if not 0 <= self.spec_accepted_tokens <= self.spec_draft_tokens:
            return None
        return self.spec_accepted_tokens / self.spec_draft_tokens

    @property
    def prefix_cache_hit_share(self) -> float | None:
        """The share of looked-up prompt tokens the prefix cache served without prefill (None: unknown)."""
        if not self.prefix_cache_queried or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queried

    def outside_engine_ms(self, ttft_sent_ms: float | None) -> float | None:
        """What a mean TTFT (from the send) holds beyond the engine's queue and prefill: the API server's
        front end (HTTP, tokenising, handing the request on), the network, the first chunk's way back, and on
        vLLM the step in flight when the request reached the engine (its queue time starts after that step)."""
        if ttft_sent_ms is None or self.queue_ms_mean is None or self.prefill_ms_mean is None:
            return None
        return ttft_sent_ms - self.queue_ms_mean - self.prefill_ms_mean

    def per_s(self, tokens: float | None) -> float | None:
        """A counter's rate over its span (``prompt_tokens`` or ``generation_tokens``)."""
        return tokens / self.counted_s if tokens is not None and self.counted_s else None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ServerSample:
        gauges: dict[str, Any] = {f.name: raw.get(f.name) for f in dataclasses.fields(cls)}
        gauges.update(source=str(raw["source"]), samples=int(raw["samples"]))
        return cls(**gauges)
