"""One finished (or interrupted) load level: the record the generator writes and the planner reads.

Each field is declared once (``loadgen.level.declared``): its JSON key, its value in a file written
before it existed, and how the shares of several workers combine. ``to_json``, ``from_json`` and
``loadgen.run.merge`` derive from those declarations. Histograms are the source of truth; the
``summary`` block is written for humans and never read back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Self

from loadgen.errors import ErrorKind
from loadgen.histogram import HistogramConfig, LatencyHistogram
from loadgen.level import client_health
from loadgen.level.breakdown import (
    ModelBreakdown,
    Trend,
    added_counts,
    empty_histograms,
    merged_histograms,
    merged_models,
    merged_turns,
)
from loadgen.level.declared import (
    Context,
    added,
    added_where_kept,
    any_share,
    count,
    counter,
    declare,
    decode,
    encode,
    every_share,
    first,
    first_known,
    flag,
    kept_counter,
    largest_known,
    non_negative,
    number,
)
from loadgen.level.independence import independent_share
from loadgen.level.server_sample import ServerSample
from loadgen.level.summary import level_summary
from loadgen.load import Load
from loadgen.quantity import LAG_THRESHOLD_MS, Aggregate, Metric, Quantity

WINDOW_LIFETIMES: Final = 3.0  # a measured window shorter than this many mean request lifetimes is quantised


def _errors(value: Any, _ctx: Context) -> dict[ErrorKind, int]:
    errors: dict[ErrorKind, int] = {}
    for kind, n in value.items():
        try:
            errors[ErrorKind(kind)] = count(n)
        except ValueError as exc:
            raise ValueError(f".{kind} {exc}") from None
    return errors


def _errors_out(errors: Mapping[ErrorKind, int]) -> dict[str, int]:
    return {k.value: v for k, v in sorted(errors.items())}


def _histograms(value: Any, ctx: Context) -> dict[Metric, LatencyHistogram]:
    oor = ctx.raw.get("out_of_range", {})
    return {m: LatencyHistogram.decode(value.get(m.value, ""), ctx.config, int(oor.get(m.value, 0))) for m in Metric}


def _turns(value: Any, ctx: Context) -> dict[int, dict[Metric, LatencyHistogram]] | None:
    turns = {
        int(t): {Metric(m): LatencyHistogram.decode(h, ctx.config) for m, h in hs.items()} for t, hs in value.items()
    }
    return turns or None


def _turns_out(turns: Mapping[int, Mapping[Metric, LatencyHistogram]] | None) -> Any:
    return {str(t): {m.value: h.encode() for m, h in hs.items()} for t, hs in turns.items()} if turns else None


def _models(value: Any, ctx: Context) -> dict[str, ModelBreakdown] | None:
    return {str(name): ModelBreakdown.from_json(part, ctx.config) for name, part in value.items()} or None


def _trend_sum(values: Any) -> tuple[float, ...] | None:
    """Trend sums add up, where every share kept one."""
    return None if any(v is None for v in values) else tuple(map(sum, zip(*values)))


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelResult:
    """One finished (or interrupted) load level."""

    load: Load = declare("load", read=lambda v, _c: Load.from_json(v), write=Load.to_json, combine=first)
    window_s: float = declare("window_s", read=non_negative, combine=max)  # measured: warm-up and drain excluded
    completed: int = counter("completed")  # successful requests that finished in the window
    errors: Mapping[ErrorKind, int] = declare("errors", read=_errors, write=_errors_out, combine=added_counts)
    prompt_tokens: int = counter("tokens.prompt")  # of completed requests that reported usage
    # how many completed requests reported prompt usage (a file before it was counted: all of them)
    prompt_tokens_reported: int = counter("tokens.prompt_reported", absent=lambda raw: raw["completed"])
    output_tokens: int = counter("tokens.output")  # of completed requests
    # the max_tokens those requests asked for, each its own draw of a length spread (None: an older or
    # imported file, which did not keep it)
    asked_output_tokens: int | None = kept_counter("tokens.output_asked")
    # output tokens that arrived inside the window (successful requests)
    window_output_tokens: float = declare("tokens.output_in_window", read=non_negative, combine=added)
    tokens_estimated: bool = declare("tokens.estimated", read=flag, combine=any_share)  # some counted from chunks
    # reasoning models (of completed requests): reasoning tokens (the server's usage, else the reasoning
    # events counted: ``reasoning_counted`` requests so)
    reasoning_tokens: int = counter("tokens.reasoning", default=0)
    reasoning_counted: int = counter("tokens.reasoning_counted", default=0)
    # token events of the completed requests, and how many of those requests said each chunk's tokens (vLLM's
    # continuous usage): a server that sends several tokens an event (speculative decoding) has ITL per event
    # unless every request did
    token_events: int = counter("tokens.events", default=0)
    usage_per_chunk: int = counter("tokens.usage_per_chunk", default=0)
    # vision requests: the image tokens of the prompt tokens, over the requests whose usage said them apart
    image_tokens: int = counter("tokens.image", default=0)
    image_tokens_reported: int = counter("tokens.image_reported", default=0)
    # pooling APIs (embeddings, rerank): the inputs (documents) the completed requests' answers accounted for
    inputs: int = counter("tokens.inputs", default=0)
    tool_call_turns: int = counter("tool_call_turns", default=0)  # turns answered with a tool call
    # time-weighted mean of requests in flight (sent..done) in the window
    achieved_concurrency: float = declare("achieved_concurrency", read=non_negative, combine=added)
    # p99 lag above this flags the level client-bound
    lag_threshold_ms: float = declare("lag_threshold_ms", default=LAG_THRESHOLD_MS, read=number, combine=first)
    complete: bool = declare("complete", default=True, read=flag, combine=every_share)  # False: interrupted
    workers: int = counter("workers", default=1)
    # completed requests that met every SLO limit (None: no SLO at run time)
    good: int | None = kept_counter("good")
    # CPU the generator's processes used during the window (user+sys)
    client_cpu_s: float | None = declare("client_cpu_s", default=None, read=number, combine=added_where_kept)
    offered: int | None = kept_counter("offered")  # requests due inside the window
    cohorts: int | None = kept_counter("cohorts")  # of those, groups due together (``LevelRecorder.due``)
    empty: int = counter("empty", default=0)  # completed requests that streamed no output token
    cut: int = counter("cut", default=0)  # in flight when the level ended: no outcome, not failures
    # Trend sums of TTFT (s) against due time in the window (s)
    ttft_trend: tuple[float, ...] | None = declare(
        "ttft_trend", default=None, read=lambda v, _c: tuple(float(x) for x in v), write=lambda t: list(t) if t else t,
        combine=_trend_sum,
    )  # fmt: skip
    # multi-turn sessions: per turn index (1 = first), TURN_METRICS' histograms
    by_turn: Mapping[int, Mapping[Metric, LatencyHistogram]] | None = declare(
        "by_turn", default=None, read=_turns, write=_turns_out, combine=merged_turns
    )
    # requests split over several models: each one's part
    by_model: Mapping[str, ModelBreakdown] | None = declare(
        "by_model", default=None, read=_models, combine=merged_models,
        write=lambda models: {name: part.to_json() for name, part in models.items()} if models else None,
    )  # fmt: skip
    # p99 lateness of the generator's event loop timer (any cause)
    loop_lag_p99_ms: float | None = declare("loop_lag_p99_ms", default=None, read=number, combine=largest_known)
    # time the generator's loop was runnable but had no core (Linux)
    runqueue_wait_s: float | None = declare("runqueue_wait_s", default=None, read=number, combine=added_where_kept)
    # a split level: each worker that was client-bound on its own, and why (``loadgen.run.merge`` sets it)
    bound_workers: tuple[str, ...] = declare(
        "bound_workers", default=(), read=lambda v, _c: tuple(str(x) for x in v), write=list, combine=first
    )
    # imported levels: the source's own figures by quantity key (``tpot_p95``, ``itl_mean``: ms), read back
    # exactly (None: measured); with ``synthesised`` the histograms were made to fit those figures, so every
    # other statistic is absent, never read off them (a file with per-request records gives real ones)
    given: Mapping[str, float] | None = declare(
        "given", default=None, read=lambda v, _c: {str(k): float(x) for k, x in v.items()},
        write=lambda g: dict(sorted(g.items())) if g is not None else None, combine=first,
    )  # fmt: skip
    synthesised: bool = declare("synthesised", default=False, read=flag, combine=first)
    # which attempt at this level counts (``--retries``: earlier ones are in ``Results.retried``)
    attempt: int = declare("attempt", default=1, read=count, combine=first)
    # the stretches in which the server refused every connection and answered nothing, added up (None: never)
    outage_s: float | None = declare("outage_s", default=None, read=number, combine=largest_known)
    # the level stopped because the server had stopped answering (and the sweep)
    target_gone: bool = declare("target_gone", default=False, read=flag, combine=any_share)
    server: ServerSample | None = declare(
        "server", default=None, read=lambda v, _c: ServerSample.from_json(v) if v else None,
        write=lambda s: s.to_json() if s else None, combine=first_known,
    )  # fmt: skip
    histograms: Mapping[Metric, LatencyHistogram] = declare(
        "histograms", read=_histograms, write=lambda hs: {m.value: h.encode() for m, h in hs.items()},
        combine=merged_histograms,
    )  # fmt: skip

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
        fit = Trend.from_sums(self.ttft_trend).slope()
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
        """Why the numbers measure the client, not the server (``client_health.bound_causes``)."""
        return client_health.bound_causes(self)

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
        return level_summary(self)

    def to_json(self) -> dict[str, Any]:
        out = encode(self)
        out["client_bound"] = self.client_bound  # derived: written for readers, never read back
        out["out_of_range"] = {m.value: h.out_of_range for m, h in self.histograms.items() if h.out_of_range}
        out["summary"] = self.summary()
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], config: HistogramConfig) -> Self:
        """A level as a results file holds it; a bad value raises ValueError naming its key."""
        return cls(**decode(cls, raw, config))
