"""The results file: the contract between the load generator and the planner.

Pure (json + histograms): the planner imports it. One versioned JSON schema,
written atomically, readable by every later version. Histograms are the
source of truth; each level's ``summary`` block is for humans and ``jq``: it
is written, never read back (``from_json`` re-derives it), so there are
never two truths.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from loadgen.errors import ErrorKind, MissingResultsFile, ResultsError, SchemaVersionError, parse_json
from loadgen.histogram import DEFAULT_CONFIG, HistogramConfig, LatencyHistogram
from loadgen.limits import MAX_FILE_LEVELS
from loadgen.load import Load
from loadgen.quantity import LAG_THRESHOLD_MS, Aggregate, Quantity
from loadgen.quantity import Metric as Metric  # re-exported: results and metrics travel together
from loadgen.run_settings import RunSettings

# What a user may promise: latencies a request's user sees. Lag and queue describe the generator and
# its in-flight cap, not the service, and are never an SLO (profiles and --slo read the same set).
SCHEMA: Final = "loadgen.results"
SCHEMA_VERSION: Final = 1
SUMMARY_PERCENTILES: Final = (50, 90, 95, 99)
TURN_METRICS: Final = (Metric.TTFT, Metric.TPOT, Metric.E2E)  # recorded per turn of a conversation
CLIENT_CPU_BOUND: Final = 0.9  # a generator process busy 90% of the window cannot read on time
# Another process (a noisy neighbour, a hypervisor's steal) holds the generator's core when it waited
# for it more than this share of the time it was ready to run (wait / (wait + run)): it got less than
# 40% of a core each time it woke, i.e. at least two competitors. The share of the *window* it waited
# is no measure of that: a client that needs little CPU (the native wire) waits little in total even
# when every wake-up is late. Seen here at c=64 with the native wire, the simulator on the other core:
# 1% quiet; 44-47% with one CPU-bound process pinned to its core or one on each core (ITL p99 within
# ~20%, TTFT p50 within 2 ms); 75% with three pinned to its core (ITL p99 ~250 ms against ~90-120).
MULTI_TOKEN_EVENTS: Final = 1.2  # output tokens per token event beyond this: several tokens an event
CLIENT_WAIT_BOUND: Final = 0.6
CLIENT_WAIT_FLOOR: Final = 0.05  # ...and it waited at least this share of the window (not a few wake-ups)
# One competitor is a fair half of the core, which a light generator can spare; a generator that wanted
# more than CLIENT_CPU_BOUND of its core (ran + waited for it) was behind all along, whoever held the
# core. Seen here at c=256 beside one CPU hog on its core: ran 49%, waited ~49%, TTFT p99 +75 ms (quiet:
# +7 ms); at c=64 beside the same hog: ran 26%, waited ~26%, within 1 ms of quiet.
# Below the bounds above, a level is trusted, but one whose generator waited at least this share of its
# ready time for a core shared it with another process: each wake-up can then be a scheduler slice late,
# which shows in the tail (c=256 beside one hog with the compiled reader: ready 88%, TTFT p99 +19.8 ms
# against +2-5 quiet, the median within 1 ms). Its timer-lateness caveat says so: the tail is an upper bound.
CORE_SHARED: Final = 0.25
WINDOW_LIFETIMES: Final = 3.0  # a measured window shorter than this many mean request lifetimes is quantised


@dataclass(frozen=True, slots=True)
class ServerSample:
    """The server's own gauges, scraped from its Prometheus endpoint during the window."""

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
        """The share of draft tokens the server accepted over the window (None: it counts none)."""
        if not self.spec_draft_tokens or self.spec_accepted_tokens is None:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "samples": self.samples,
            "running_mean": self.running_mean,
            "waiting_mean": self.waiting_mean,
            "kv_usage_mean": self.kv_usage_mean,
            "counted_s": self.counted_s,
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "queue_ms_mean": self.queue_ms_mean,
            "prefill_ms_mean": self.prefill_ms_mean,
            "prefill_requests": self.prefill_requests,
            "prefix_cache_queried": self.prefix_cache_queried,
            "prefix_cache_hits": self.prefix_cache_hits,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "spec_draft_tokens": self.spec_draft_tokens,
            "spec_accepted_tokens": self.spec_accepted_tokens,
        }

    def per_s(self, tokens: float | None) -> float | None:
        """A counter's rate over its span (``prompt_tokens`` or ``generation_tokens``)."""
        return tokens / self.counted_s if tokens is not None and self.counted_s else None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ServerSample:
        return cls(
            str(raw["source"]),
            int(raw["samples"]),
            raw.get("running_mean"),
            raw.get("waiting_mean"),
            raw.get("kv_usage_mean"),
            raw.get("counted_s"),
            raw.get("prompt_tokens"),
            raw.get("generation_tokens"),
            raw.get("queue_ms_mean"),
            raw.get("prefill_ms_mean"),
            raw.get("prefill_requests"),
            raw.get("prefix_cache_queried"),
            raw.get("prefix_cache_hits"),
            raw.get("kv_capacity_tokens"),
            raw.get("spec_draft_tokens"),
            raw.get("spec_accepted_tokens"),
        )


@dataclass(slots=True)
class Trend:
    """Sufficient statistics of a least-squares line y = a + b x, in O(1) memory and exactly mergeable.

    x: a request's due time in the window (s); y: its TTFT (s). In a steady
    level the line is flat; past capacity the queue grows and so does TTFT.
    """

    n: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y
        self.syy += y * y

    def as_tuple(self) -> tuple[float, float, float, float, float, float]:
        return (self.n, self.sx, self.sy, self.sxx, self.sxy, self.syy)

    def slope(self) -> tuple[float, float] | None:
        """(slope, its standard error), or None with fewer than 3 points or no spread in x."""
        n = self.n
        if n < 3:
            return None
        sxx = self.sxx - self.sx * self.sx / n
        if sxx <= 0:
            return None
        sxy = self.sxy - self.sx * self.sy / n
        syy = self.syy - self.sy * self.sy / n
        b = sxy / sxx
        residual = max(syy - b * sxy, 0.0) / (n - 2)
        return b, math.sqrt(residual / sxx)


def empty_histograms(config: HistogramConfig = DEFAULT_CONFIG) -> dict[Metric, LatencyHistogram]:
    return {m: LatencyHistogram(config) for m in Metric}


@dataclass(frozen=True, slots=True)
class ModelBreakdown:
    """One model's part of a level whose requests named several (LoRA adapters behind one endpoint): its
    requests' outcomes and the per-request latencies (``TURN_METRICS``) of those that completed."""

    completed: int
    errors: Mapping[ErrorKind, int]
    histograms: Mapping[Metric, LatencyHistogram]

    def merged(self, other: ModelBreakdown) -> ModelBreakdown:
        hists = {m: h.copy() for m, h in self.histograms.items()}
        for m, h in other.histograms.items():
            hists[m].merge(h)
        errors = {k: self.errors.get(k, 0) + other.errors.get(k, 0) for k in {*self.errors, *other.errors}}
        return ModelBreakdown(self.completed + other.completed, errors, hists)

    def to_json(self) -> dict[str, Any]:
        return {
            "completed": self.completed,
            "errors": {k.value: v for k, v in sorted(self.errors.items())},
            "histograms": {m.value: h.encode() for m, h in self.histograms.items()},
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], config: HistogramConfig) -> ModelBreakdown:
        return cls(
            int(raw["completed"]),
            {ErrorKind(k): int(v) for k, v in raw.get("errors", {}).items()},
            {Metric(m): LatencyHistogram.decode(h, config) for m, h in raw["histograms"].items()},
        )


@dataclass(frozen=True, slots=True)
class LevelResult:
    """One finished (or interrupted) load level."""

    load: Load
    window_s: float  # measured window: warm-up and drain excluded
    completed: int  # successful requests that finished in the window
    errors: Mapping[ErrorKind, int]  # failed requests in the window, by kind
    output_tokens: int  # of completed requests
    window_output_tokens: float  # output tokens that arrived inside the window (successful requests)
    prompt_tokens: int  # of completed requests that reported usage
    prompt_tokens_reported: int  # how many completed requests reported prompt usage
    tokens_estimated: bool  # some output counts were chunk counts, not server usage
    achieved_concurrency: float  # time-weighted mean of requests in flight (sent..done) in the window
    histograms: Mapping[Metric, LatencyHistogram]
    lag_threshold_ms: float = LAG_THRESHOLD_MS  # p99 lag above this flags the level client-bound
    server: ServerSample | None = None
    complete: bool = True  # False: the level was interrupted
    workers: int = 1
    good: int | None = None  # completed requests that met every SLO limit (None: no SLO at run time)
    client_cpu_s: float | None = None  # CPU the generator's processes used during the window (user+sys)
    offered: int | None = None  # requests due inside the window (None: written before it was counted)
    cohorts: int | None = None  # of those, groups due together (``LevelRecorder.due``; None: not counted)
    ttft_trend: tuple[float, ...] | None = None  # Trend sums of TTFT (s) against due time in the window (s)
    empty: int = 0  # completed requests that streamed no output token (in no latency histogram)
    cut: int = 0  # requests in flight when the level ended (drain limit or interrupt): no outcome, not failures
    # multi-turn sessions: per turn index (1 = first), TURN_METRICS' histograms
    by_turn: Mapping[int, Mapping[Metric, LatencyHistogram]] | None = None
    by_model: Mapping[str, ModelBreakdown] | None = None  # requests split over several models: each one's part
    loop_lag_p99_ms: float | None = None  # p99 lateness of the generator's event loop timer (any cause)
    runqueue_wait_s: float | None = None  # time the generator's loop was runnable but had no core (Linux)
    bound_workers: tuple[str, ...] = ()  # a split level: each worker that was client-bound on its own, and why
    # imported levels: the source's own figures by quantity key (``tpot_p95``, ``itl_mean``: ms), read back
    # exactly (None: measured); with ``synthesised`` the histograms were made to fit those figures, so every
    # other statistic is absent, never read off them (a file with per-request records gives real ones)
    given: Mapping[str, float] | None = None
    synthesised: bool = False
    attempt: int = 1  # which attempt at this level counts (``--retries``: earlier ones are in ``Results.retried``)
    # the longest stretch in which the server refused every connection and answered nothing (None: never)
    outage_s: float | None = None
    target_gone: bool = False  # the level stopped because the server had stopped answering (and the sweep)
    # reasoning models and agents (of completed requests): reasoning tokens (the server's usage, else the
    # reasoning events counted: ``reasoning_counted`` requests so), and turns answered with a tool call
    reasoning_tokens: int = 0
    reasoning_counted: int = 0
    tool_call_turns: int = 0
    # token events of the completed requests, and how many of those requests said each chunk's tokens (vLLM's
    # continuous usage): a server that sends several tokens an event (speculative decoding) has ITL per event
    # unless every request did
    token_events: int = 0
    usage_per_chunk: int = 0
    # vision requests: the image tokens of the prompt tokens, over the requests whose usage said them apart
    image_tokens: int = 0
    image_tokens_reported: int = 0
    # pooling APIs (embeddings, rerank): the inputs (documents) the completed requests' answers accounted for
    inputs: int = 0

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    @property
    def error_rate(self) -> float | None:
        """failed / (completed + failed); None when nothing finished in the window."""
        total = self.completed + self.failed
        return self.failed / total if total else None

    @property
    def output_tokens_per_s(self) -> float | None:
        return self.window_output_tokens / self.window_s if self.window_s > 0 else None

    @property
    def requests_per_s(self) -> float | None:
        return self.completed / self.window_s if self.window_s > 0 else None

    @property
    def pooling(self) -> bool:
        """A pooling API's level (embeddings, rerank): batches answered whole, no token stream to time."""
        return self.load.batch is not None

    @property
    def inputs_per_s(self) -> float | None:
        """Pooling: inputs answered per second in the window (requests/s times their batch)."""
        return self.inputs / self.window_s if self.pooling and self.window_s > 0 else None

    @property
    def prompt_tokens_per_s(self) -> float | None:
        """Prompt tokens per second in the window, over the requests whose usage counted them (None: none did)."""
        if not self.prompt_tokens_reported or self.window_s <= 0:
            return None
        return self.prompt_tokens * self.completed / self.prompt_tokens_reported / self.window_s

    @property
    def offered_per_s(self) -> float | None:
        """Requests due per second in the window: the load asked for, beside ``requests_per_s`` served."""
        return self.offered / self.window_s if self.offered is not None and self.window_s > 0 else None

    def ttft_growth_s(self) -> tuple[float, float] | None:
        """How much TTFT grew across the window by its trend line, and that growth's standard error (s)."""
        if self.ttft_trend is None:
            return None
        fit = Trend(*self.ttft_trend).slope()
        return None if fit is None else (fit[0] * self.window_s, fit[1] * self.window_s)

    @property
    def tokens_per_event(self) -> float | None:
        """Output tokens per token event (1: one a chunk; more: speculative decoding, or a server that batches
        tokens per event); None where the events were not counted (an imported file, an older one)."""
        return self.output_tokens / self.token_events if self.token_events else None

    @property
    def itl_per_token(self) -> bool:
        """Whether ITL is per token: every completed request said each chunk's tokens (continuous usage), so
        each event's gap was split over them; otherwise ITL is per event."""
        return self.completed > 0 and self.usage_per_chunk == self.completed

    @property
    def tokens_per_gap(self) -> float:
        """Output tokens one ITL gap spans: 1 where ITL is per token (``itl_per_token``, or each event held
        one), else the tokens an event (a verified step of speculative decoding)."""
        per_event = self.tokens_per_event
        if per_event is None or self.itl_per_token:
            return 1.0
        return max(per_event, 1.0)

    @property
    def goodput_ratio(self) -> float | None:
        """Share of finished requests (failures included) that met every SLO limit."""
        total = self.completed + self.failed
        return self.good / total if self.good is not None and total else None

    @property
    def client_cpu_utilization(self) -> float | None:
        """Busy share of the generator's processes over the window (1.0 = each worker's core saturated)."""
        if self.client_cpu_s is None or self.window_s <= 0:
            return None
        return self.client_cpu_s / (self.window_s * self.workers)

    @property
    def core_wait_ratio(self) -> float | None:
        """Share of the time the generator was ready to run that it spent waiting for a core (any cause)."""
        if self.runqueue_wait_s is None or self.client_cpu_s is None or self.runqueue_wait_s + self.client_cpu_s <= 0:
            return None
        return self.runqueue_wait_s / (self.runqueue_wait_s + self.client_cpu_s)

    @property
    def steal_share(self) -> float | None:
        """Share of the window the generator's loop waited for a core while runnable (any other process)."""
        if self.runqueue_wait_s is None or self.window_s <= 0:
            return None
        return self.runqueue_wait_s / (self.window_s * self.workers)

    @property
    def client_bound_causes(self) -> tuple[str, ...]:
        """Why the numbers measure the client, not the server (empty: they do not).

        p99 generator lag above the threshold (open loop); the generator's CPU
        saturated (closed loop, where lag cannot grow: a busy client reads
        late instead); or another process holding the generator's core (a
        noisy neighbour, CPU steal), which its own CPU time cannot show. A
        level split across workers is bound when any one worker was: the
        merged averages would hide one saturated worker among idle ones.
        """
        out = []
        p99 = self.histograms[Metric.LAG].percentile_us(99)
        if p99 is not None and p99 > self.lag_threshold_ms * 1000:
            out.append(f"send lag p99 {p99 / 1000:.1f} ms > {self.lag_threshold_ms:g} ms")
        cpu = self.client_cpu_utilization
        if cpu is not None and cpu > CLIENT_CPU_BOUND:
            out.append(f"generator CPU {cpu:.0%} busy")
        steal, wait = self.steal_share, self.core_wait_ratio
        if steal is not None and wait is not None and wait > CLIENT_WAIT_BOUND and steal > CLIENT_WAIT_FLOOR:
            out.append(f"its core taken by another process: it waited {wait:.0%} of the time it was ready to run")
        elif cpu is not None and steal is not None and cpu <= CLIENT_CPU_BOUND < cpu + steal:
            out.append(
                f"generator ready to run {cpu + steal:.0%} of the window (it ran {cpu:.0%}, and waited "
                f"{steal:.0%} for a core another process held)"
            )
        return tuple(out) + self.bound_workers

    @property
    def client_bound(self) -> bool:
        return bool(self.client_bound_causes)

    def statistic_ms(self, quantity: Quantity) -> float | None:
        """A percentile, mean or maximum in ms; an imported source's own figure, exactly, or None without it."""
        if self.given is not None and quantity.key in self.given:
            return self.given[quantity.key]
        if self.synthesised:
            return None
        hist = self.histograms[quantity.metric]
        value = (
            hist.mean_us()
            if quantity.aggregate == Aggregate.MEAN
            else hist.max_us()
            if quantity.aggregate == Aggregate.MAX
            else hist.percentile_us(quantity.percentile or 0.0)
        )
        return None if value is None else value / 1000.0

    def percentile_ms(self, metric: Metric, percentile: float) -> float | None:
        return self.statistic_ms(Quantity(metric, percentile=percentile))

    def mean_ms(self, metric: Metric) -> float | None:
        return self.statistic_ms(Quantity(metric, aggregate=Aggregate.MEAN))

    def model_view(self, name: str) -> LevelResult:
        """The level as one model's requests saw it (their outcomes and latencies; nothing else, so a
        throughput read off it is absent, never the whole level's), for verdicts per model."""
        part = (self.by_model or {})[name]
        hists = empty_histograms(self.histograms[Metric.TTFT].config)
        hists.update({m: h.copy() for m, h in part.histograms.items()})
        return dataclasses.replace(
            self, completed=part.completed, errors=dict(part.errors), histograms=hists, by_model=None, by_turn=None,
            good=None, offered=None, cohorts=None, output_tokens=0, window_output_tokens=0.0,
        )  # fmt: skip

    def absent_because(self, quantity: Quantity) -> str | None:
        """Why a statistic has no value here, in words a report can print (None: it has one)."""
        if self.synthesised and (self.given is None or quantity.key not in self.given):
            return f"{quantity.key} not in the imported file"
        return None if self.histograms[quantity.metric].count else f"no {quantity.metric.value} samples"

    def independent_samples(self, metric: Metric) -> float:
        """How many of this metric's samples carry independent information.

        About one per engine step for ITL: every running stream's gap comes
        from the same step, so the pooled count is divided by the batch
        (methodology §2.7: never take pooled ITL count as n). One per request
        for per-request metrics, except in a closed loop, where requests due
        together (a cohort: a burst start, clients phase-locked past the batch
        cap) share every step and count once: the count is scaled by cohorts
        per request due. An open loop's send times are its schedule's, not the
        server's, so its coincidences are left to the design effect.
        """
        n = self.histograms[metric].count
        if metric == Metric.ITL:
            return n / max(self.achieved_concurrency, 1.0)
        return n * independent_share(self.load, self.cohorts, self.offered)

    def summary(self) -> dict[str, Any]:
        """The human/``jq`` block (milliseconds); never read back."""
        out: dict[str, Any] = {}
        for metric in Metric:
            out[f"{metric.value}_ms"] = _metric_summary(self.histograms[metric])
        out.update(
            output_tokens_per_s=_round(self.output_tokens_per_s),
            requests_per_s=_round(self.requests_per_s),
            offered_per_s=_round(self.offered_per_s),
            achieved_concurrency=round(self.achieved_concurrency, 3),
            completed=self.completed,
            failed=self.failed,
            cut=self.cut,
            errors={k.value: v for k, v in sorted(self.errors.items())},
            prompt_tokens_mean=_round(mean_prompt_tokens([self])),
            output_tokens_mean=_round(mean_output_tokens([self])),
            tokens_estimated=self.tokens_estimated,
            client_bound=self.client_bound,
            client={
                "loop_lag_p99_ms": _round(self.loop_lag_p99_ms),
                "steal_share": _round(self.steal_share),
                "core_wait_ratio": _round(self.core_wait_ratio),
            },
            load=self.load.to_json(),
        )
        if self.reasoning_tokens or self.tool_call_turns:  # a reasoning model's or an agent's level
            out["reasoning_tokens_mean"] = _round(self.reasoning_tokens / self.completed if self.completed else None)
            out["reasoning_tokens_from"] = "counted" if self.reasoning_counted else "usage"
            out["tool_call_turns"] = self.tool_call_turns
        if self.image_tokens_reported:
            out["image_tokens_mean"] = _round(self.image_tokens / self.image_tokens_reported)
        if self.pooling:
            out.update(
                inputs_per_s=_round(self.inputs_per_s),
                prompt_tokens_per_s=_round(self.prompt_tokens_per_s),
                inputs_per_request=_round(self.inputs / self.completed if self.completed else None),
            )
        if (per_event := self.tokens_per_event) is not None and per_event > MULTI_TOKEN_EVENTS:
            out["tokens_per_event"] = _round(per_event)
            out["itl_per"] = "token" if self.itl_per_token else "event"
        if self.by_model:
            out["by_model"] = {
                name: {
                    "completed": part.completed,
                    "failed": sum(part.errors.values()),
                    **{f"{m.value}_ms": _metric_summary(h) for m, h in part.histograms.items()},
                }
                for name, part in self.by_model.items()
            }
        if self.by_turn:
            out["by_turn"] = {
                str(t): {f"{m.value}_ms": _metric_summary(h) for m, h in hists.items()}
                for t, hists in self.by_turn.items()
            }
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "load": self.load.to_json(),
            "window_s": self.window_s,
            "completed": self.completed,
            "errors": {k.value: v for k, v in sorted(self.errors.items())},
            "tokens": {
                "prompt": self.prompt_tokens,
                "prompt_reported": self.prompt_tokens_reported,
                "output": self.output_tokens,
                "output_in_window": self.window_output_tokens,
                "estimated": self.tokens_estimated,
                "reasoning": self.reasoning_tokens,
                "reasoning_counted": self.reasoning_counted,
                "events": self.token_events,
                "usage_per_chunk": self.usage_per_chunk,
                "image": self.image_tokens,
                "image_reported": self.image_tokens_reported,
                "inputs": self.inputs,
            },
            "tool_call_turns": self.tool_call_turns,
            "achieved_concurrency": self.achieved_concurrency,
            "lag_threshold_ms": self.lag_threshold_ms,
            "client_bound": self.client_bound,
            "complete": self.complete,
            "workers": self.workers,
            "good": self.good,
            "client_cpu_s": self.client_cpu_s,
            "offered": self.offered,
            "cohorts": self.cohorts,
            "empty": self.empty,
            "cut": self.cut,
            "ttft_trend": list(self.ttft_trend) if self.ttft_trend is not None else None,
            "by_turn": {str(t): {m.value: h.encode() for m, h in hs.items()} for t, hs in self.by_turn.items()}
            if self.by_turn
            else None,
            "by_model": {name: part.to_json() for name, part in self.by_model.items()} if self.by_model else None,
            "loop_lag_p99_ms": self.loop_lag_p99_ms,
            "runqueue_wait_s": self.runqueue_wait_s,
            "bound_workers": list(self.bound_workers),
            "given": dict(sorted(self.given.items())) if self.given is not None else None,
            "synthesised": self.synthesised,
            "attempt": self.attempt,
            "outage_s": self.outage_s,
            "target_gone": self.target_gone,
            "server": self.server.to_json() if self.server else None,
            "out_of_range": {m.value: h.out_of_range for m, h in self.histograms.items() if h.out_of_range},
            "histograms": {m.value: h.encode() for m, h in self.histograms.items()},
            "summary": self.summary(),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], config: HistogramConfig) -> LevelResult:
        _check_level_numbers(raw)
        oor = raw.get("out_of_range", {})
        hists = raw["histograms"]
        tokens = raw["tokens"]
        return cls(
            load=Load.from_json(raw["load"]),
            window_s=float(raw["window_s"]),
            completed=int(raw["completed"]),
            errors={ErrorKind(k): int(v) for k, v in raw["errors"].items()},
            output_tokens=int(tokens["output"]),
            window_output_tokens=float(tokens["output_in_window"]),
            prompt_tokens=int(tokens["prompt"]),
            prompt_tokens_reported=int(tokens.get("prompt_reported", raw["completed"])),
            tokens_estimated=bool(tokens["estimated"]),
            achieved_concurrency=float(raw["achieved_concurrency"]),
            histograms={
                m: LatencyHistogram.decode(hists.get(m.value, ""), config, int(oor.get(m.value, 0))) for m in Metric
            },
            lag_threshold_ms=float(raw.get("lag_threshold_ms", LAG_THRESHOLD_MS)),
            server=ServerSample.from_json(raw["server"]) if raw.get("server") else None,
            complete=bool(raw.get("complete", True)),
            workers=int(raw.get("workers", 1)),
            good=None if raw.get("good") is None else int(raw["good"]),
            client_cpu_s=None if raw.get("client_cpu_s") is None else float(raw["client_cpu_s"]),
            offered=None if raw.get("offered") is None else int(raw["offered"]),
            cohorts=None if raw.get("cohorts") is None else int(raw["cohorts"]),
            empty=int(raw.get("empty", 0)),
            cut=int(raw.get("cut", 0)),
            ttft_trend=None if raw.get("ttft_trend") is None else tuple(float(v) for v in raw["ttft_trend"]),
            by_turn={
                int(t): {Metric(m): LatencyHistogram.decode(h, config) for m, h in hs.items()}
                for t, hs in raw["by_turn"].items()
            }
            if raw.get("by_turn")
            else None,
            by_model={str(name): ModelBreakdown.from_json(part, config) for name, part in raw["by_model"].items()}
            if raw.get("by_model")
            else None,
            loop_lag_p99_ms=None if raw.get("loop_lag_p99_ms") is None else float(raw["loop_lag_p99_ms"]),
            runqueue_wait_s=None if raw.get("runqueue_wait_s") is None else float(raw["runqueue_wait_s"]),
            bound_workers=tuple(str(x) for x in raw.get("bound_workers") or ()),
            given=None if raw.get("given") is None else {str(k): float(v) for k, v in raw["given"].items()},
            synthesised=bool(raw.get("synthesised", False)),
            attempt=int(raw.get("attempt", 1)),
            outage_s=None if raw.get("outage_s") is None else float(raw["outage_s"]),
            target_gone=bool(raw.get("target_gone", False)),
            reasoning_tokens=int(tokens.get("reasoning", 0)),
            reasoning_counted=int(tokens.get("reasoning_counted", 0)),
            tool_call_turns=int(raw.get("tool_call_turns", 0)),
            token_events=int(tokens.get("events", 0)),
            usage_per_chunk=int(tokens.get("usage_per_chunk", 0)),
            image_tokens=int(tokens.get("image", 0)),
            image_tokens_reported=int(tokens.get("image_reported", 0)),
            inputs=int(tokens.get("inputs", 0)),
        )


def independent_share(load: Load, cohorts: int | None, offered: int | None) -> float:
    """The share of a level's requests that are independent samples (``LevelResult.independent_samples``):
    cohorts per request due in a closed loop, else all of them."""
    if load.kind == "concurrency" and cohorts is not None and offered:
        return min(1.0, cohorts / offered)
    return 1.0


def _check_level_numbers(raw: Mapping[str, Any]) -> None:
    """A level's counts and window as a results file must hold them (ValueError names the field).

    Hand-edited or corrupted files gave "-30 failed requests", a NaN window that left a level
    trusted, or an OverflowError from 1e400; every later reader relies on these being sane.
    """
    window = float(raw["window_s"])
    if not (math.isfinite(window) and window >= 0):
        raise ValueError(f"window_s must be a finite number >= 0, got {raw['window_s']!r}")
    concurrency = float(raw["achieved_concurrency"])
    if not (math.isfinite(concurrency) and concurrency >= 0):
        raise ValueError(f"achieved_concurrency must be a finite number >= 0, got {raw['achieved_concurrency']!r}")
    counts = {"completed": raw["completed"], **{f"errors.{k}": v for k, v in raw["errors"].items()}}
    counts.update({f"tokens.{k}": v for k, v in raw["tokens"].items() if k != "estimated"})
    counts.update({k: raw[k] for k in ("offered", "cohorts", "cut", "empty", "attempt") if raw.get(k) is not None})
    for name, value in counts.items():
        number = float(value)
        if not (math.isfinite(number) and number >= 0):
            raise ValueError(f"{name} must be a finite count >= 0, got {value!r}")


def duplicate_load(levels: Sequence[LevelResult]) -> str | None:
    """The label of a load two of ``levels`` share, if any: a plan or a report would count it twice."""
    seen: set[str] = set()
    for level in levels:
        if level.load.label in seen:
            return level.load.label
        seen.add(level.load.label)
    return None


def mean_prompt_tokens(levels: Sequence[LevelResult]) -> float | None:
    """Mean prompt tokens per completed request that reported usage, over these levels (a pooling level's:
    per input, the length asked of each text of its batches; a rerank input is the query and a document)."""
    reported = sum(lv.prompt_tokens_reported * _inputs_per_request(lv) for lv in levels)
    return sum(lv.prompt_tokens for lv in levels) / reported if reported else None


def _inputs_per_request(level: LevelResult) -> float:
    return level.inputs / level.completed if level.inputs and level.completed else 1.0


def reasoning_share(levels: Sequence[LevelResult]) -> float:
    """Of these levels' output tokens (completed requests), the share that was reasoning (0: none)."""
    out = sum(lv.output_tokens for lv in levels)
    return min(sum(lv.reasoning_tokens for lv in levels) / out, 1.0) if out else 0.0


def mean_output_tokens(levels: Sequence[LevelResult]) -> float | None:
    """Mean output tokens per completed request, over these levels."""
    completed = sum(lv.completed for lv in levels)
    return sum(lv.output_tokens for lv in levels) / completed if completed else None


@dataclass(frozen=True, slots=True)
class RunInfo:
    id: str
    started_at: str  # UTC ISO 8601
    tool_version: str
    python: str
    platform: str
    cpu_count: int | None
    command: str  # run | sweep


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str  # credentials, query and fragment stripped
    model: str
    api: str


@dataclass(frozen=True, slots=True)
class RetriedLevel:
    """An attempt at a level that was measured again (``--retries``), kept with why it did not count."""

    attempt: int
    reason: str  # the trust problems of the measurement (the client, the window) that made it not count
    level: LevelResult

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "reason": self.reason, "level": self.level.to_json()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], config: HistogramConfig) -> RetriedLevel:
        return cls(int(raw["attempt"]), str(raw["reason"]), LevelResult.from_json(raw["level"], config))


@dataclass(frozen=True, slots=True)
class Results:
    """A run or a sweep: its levels plus everything needed to reproduce it (no secrets)."""

    run: RunInfo
    target: Target
    settings: RunSettings  # the resolved configuration, secrets removed
    levels: tuple[LevelResult, ...]
    complete: bool  # False when interrupted: the levels present are still valid
    histogram_config: HistogramConfig = field(default=DEFAULT_CONFIG)
    notes: tuple[str, ...] = ()  # why a sweep stopped early, and similar
    retried: tuple[RetriedLevel, ...] = ()  # attempts measured again, in the order they ran

    @property
    def pooling(self) -> bool:
        """An embeddings or rerank run: latency and inputs/s to read, nothing for the planner to size."""
        return any(lv.pooling for lv in self.levels)

    def workload_fingerprint(self) -> dict[str, Any]:
        """What was measured, as far as comparability goes: API, model, lengths, convention, load mode."""
        kinds = sorted({lv.load.kind for lv in self.levels})
        arrivals = sorted(
            {(lv.load.arrival, lv.load.burstiness) for lv in self.levels if lv.load.kind == "rate"}, key=str
        )
        return {
            "api": self.target.api,
            "model": self.target.model,
            **self.settings.fingerprint(),
            "start": self.settings.start if "concurrency" in kinds else None,
            "load_mode": "/".join("closed" if k == "concurrency" else "open" for k in kinds),
            "arrival": [f"{a} (burstiness {b:g})" if b is not None else str(a) for a, b in arrivals] or None,
        }

    def to_json(self) -> str:
        doc = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "run": {k: getattr(self.run, k) for k in RunInfo.__slots__},
            "target": {k: getattr(self.target, k) for k in Target.__slots__},
            "settings": self.settings.to_json(),
            "histogram_config": self.histogram_config.to_json(),
            "complete": self.complete,
            "notes": list(self.notes),
            "levels": [level.to_json() for level in self.levels],
            "retried": [r.to_json() for r in self.retried],
        }
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "results") -> Results:
        raw = parse_json(text, source, error=ResultsError)
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
            raise ResultsError(f'{source}: not a loadgen results file (no "schema": "{SCHEMA}")')
        version = raw.get("schema_version")
        if not isinstance(version, int) or version < 1:
            raise ResultsError(f"{source}: schema_version must be a positive integer, got {version!r}")
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{source}: written with results schema {version}, this loadgen reads up to {SCHEMA_VERSION}; upgrade loadgen"
            )
        raw = migrate(raw)
        try:
            config = _histogram_config(raw["histogram_config"])
            held = len(raw["levels"]) + len(raw.get("retried") or ())  # a retried attempt is a level too
            if held > MAX_FILE_LEVELS:
                raise ResultsError(f"{source}: {held:,} levels; a results file holds at most "
                                   f"{MAX_FILE_LEVELS:,}")  # fmt: skip
            levels = tuple(LevelResult.from_json(level, config) for level in raw["levels"])
            if (twice := duplicate_load(levels)) is not None:
                raise ResultsError(
                    f"{source}: two levels at {twice}: a results file holds one level per load (a level measured "
                    "again is kept under retried); remove one"
                )
            return cls(
                run=RunInfo(**{k: raw["run"].get(k) for k in RunInfo.__slots__}),
                target=Target(**{k: raw["target"][k] for k in Target.__slots__}),
                settings=RunSettings.from_json(raw.get("settings") or {}),
                levels=levels,
                complete=bool(raw["complete"]),
                histogram_config=config,
                notes=tuple(raw.get("notes", ())),
                retried=tuple(RetriedLevel.from_json(r, config) for r in raw.get("retried") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ResultsError(f"{source}: corrupt results file ({type(exc).__name__}: {exc})") from None


MAX_HISTOGRAM_HIGHEST_US = 7 * 86_400 * 10**6  # a week: a latency past it is not one a histogram needs to hold


def _histogram_config(hc: Mapping[str, Any]) -> HistogramConfig:
    """The file's histogram range, within what a latency needs: a range of 2^62 at 5 significant figures
    once allocated gigabytes of buckets before anything was read."""
    config = HistogramConfig(hc["unit"], int(hc["lowest"]), int(hc["highest"]), int(hc["significant_figures"]))
    if config.unit != "us" or not (1 <= config.lowest < config.highest <= MAX_HISTOGRAM_HIGHEST_US):
        raise ValueError(
            f"histogram_config: expected unit us and 1 <= lowest < highest <= {MAX_HISTOGRAM_HIGHEST_US:,}"
        )
    if not 1 <= config.significant_figures <= 3:
        raise ValueError(f"histogram_config: significant_figures must be 1 to 3, got {config.significant_figures}")
    return config


def migrate(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring an older document up to ``SCHEMA_VERSION`` one step at a time (none needed yet)."""
    return raw


def save_atomic(results: Results, path: Path, *, private: bool = False) -> None:
    """Serialise fully, then write it atomically (``write_atomic``)."""
    write_atomic(path, results.to_json(), private=private)


def write_atomic(path: Path, text: str, *, private: bool = False) -> None:
    """Write a temporary file beside ``path``, fsync, then rename over it; a failed write leaves no
    temporary file behind. ``private``: readable by its owner alone (a fallback in a shared folder)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fallback_paths(results: Results, path: Path) -> tuple[Path, ...]:
    """Where a results file goes when ``path`` cannot take it: the system's temporary folder, then home."""
    name = f"loadgen-{results.run.id}-{path.name}"
    return (Path(tempfile.gettempdir()) / name, Path.home() / name)


def save_with_fallback(results: Results, path: Path) -> tuple[Path, str | None]:
    """Save at ``path``, else at the first fallback that takes it: (where it went, why ``path`` failed).

    A measurement is never lost to a full disk or a folder turned read-only after the run began.
    Raises OSError (the first failure's) only when no place could take the file.
    """
    try:
        save_atomic(results, path)
        return path, None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        first = exc
    for other in fallback_paths(results, path):
        try:
            save_atomic(results, other, private=True)
            return other, why
        except OSError:
            continue
    raise first


def load(path: Path) -> Results:
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise MissingResultsFile(f"{path}: no such results file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read ({exc})") from None
    return Results.from_json(text, source=str(path))


def _metric_summary(h: LatencyHistogram) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {"mean": _ms(h.mean_us())}
    for p in SUMMARY_PERCENTILES:
        out[f"p{p}"] = _ms(h.percentile_us(p))
    out["max"] = _ms(h.max_us())
    out["count"] = h.count
    return out


def _ms(value_us: float | None) -> float | None:
    return None if value_us is None else round(value_us / 1000.0, 3)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
