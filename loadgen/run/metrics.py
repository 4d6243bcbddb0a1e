"""The metric definitions (docs/design.md), in one place: timestamps in, histograms out.

Per request (loop-clock seconds, recorded as integer microseconds):

- TTFT = t_first - t_intended (what the user saw); TTFT_SENT = t_first - t_sent
- TPOT = (t_last - t_first) / (output_tokens - 1), requests with >= 2 tokens
- ITL  = each gap between consecutive text chunks, pooled over requests; a
  gap is divided by the chunk's tokens when the server says how many
- E2E  = t_done - t_intended
- QUEUE = t_slot - t_intended (open loop with an in-flight cap)
- LAG  = t_sent - max(t_intended, t_slot): the generator's own slip

Throughput counts the output tokens that *arrived inside the window*, from
requests that succeeded (including ones that finish during the drain).
Crediting whole requests to the window they completed in would quantise
throughput by a whole request: with 32 clients and 40 completions that is an
error of tens of percent. Request counts and latencies follow the window
rule below.

Window rule: a request counts in the window it completed in (``t_done``
inside ``[window_start, window_end]``); warm-up and drain are outside.
Failed requests count by kind in the error-rate denominator and stay out
of the latency histograms. Records are folded in and dropped: memory does
not grow with the number of requests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.errors import ErrorKind
from loadgen.histogram import DEFAULT_CONFIG, HistogramConfig, LatencyHistogram
from loadgen.level.breakdown import TURN_METRICS, ModelBreakdown, Trend, empty_histograms
from loadgen.level.independence import independent_share
from loadgen.level.result import LevelResult
from loadgen.level.server_sample import ServerSample
from loadgen.load import Load
from loadgen.quantity import LAG_THRESHOLD_MS, Metric
from loadgen.wire.records import RequestRecord

COHORT_STEPS = 4  # sends further apart than this many engine steps are never one cohort
GAP_BINS_PER_DECADE = 40  # the due-gap histogram's resolution (6% a bin), from GAP_BINS_FROM_S up
GAP_BINS_FROM_S = 1e-6
HELD_BATCH = 8192  # requests and inter-token gaps held (``_held_n``) before their durations are recorded
HELD_METRICS = (Metric.LAG, Metric.QUEUE, Metric.E2E, Metric.TTFT, Metric.TTFT_SENT, Metric.TTFO, Metric.TPOT)


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveSnapshot:
    """Running numbers for a progress display."""

    completed: int
    failed: int
    in_flight: int
    output_tokens: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None
    window_output_tokens: float = 0.0  # inside the measured window (warm-up excluded), as the result counts
    e2e_p50_ms: float | None = None  # a pooling level's request latency (it has no token stream to time)
    e2e_p95_ms: float | None = None


class LevelRecorder:
    """Folds the requests of one level into counters and histograms."""

    def __init__(
        self,
        load: Load,
        window_start: float,
        *,
        window_end: float = math.inf,
        lag_threshold_ms: float = LAG_THRESHOLD_MS,
        config: HistogramConfig = DEFAULT_CONFIG,
        goodput_limits_ms: Mapping[Metric, float] | None = None,
    ) -> None:
        self.load = load
        self.window_start = window_start
        self.window_end = window_end
        self.lag_threshold_ms = lag_threshold_ms
        self._histograms = empty_histograms(config)
        # durations waiting to be recorded, in seconds: one vectorised call per metric every HELD_BATCH
        # values, not a Python call per value (HdrHistogram's record_value ~2.5 us; a request's gaps
        # ~60 us), which was most of a short request's cost; ``histograms`` records them before any read
        self._held: dict[Metric, list[float]] = {m: [] for m in HELD_METRICS}
        self._held_streams: list[RequestRecord] = []  # whose inter-token gaps are still to be recorded
        self._held_n = 0
        self.completed = 0
        self.timed = 0  # of those, the ones sampled for latency (a closed loop's first round is not)
        self.errors: dict[ErrorKind, int] = {}
        self.output_tokens = 0
        self.asked_output_tokens = 0  # the max_tokens the completed requests asked for
        self.window_output_tokens = 0.0
        self.prompt_tokens = 0
        self.prompt_tokens_reported = 0
        self.tokens_estimated = False
        self.in_flight = 0
        self.goodput_limits_ms = dict(goodput_limits_ms) if goodput_limits_ms else None
        self.good = 0  # completed requests within every goodput limit
        self._area = 0.0  # integral of in-flight count over the window (request-seconds)
        self._last_t = window_start
        self.offered = 0  # requests due inside the window (scheduled arrivals; closed loop: sends)
        self.cut = 0  # requests cut in flight when the level ended
        self._due_gaps = np.zeros(9 * GAP_BINS_PER_DECADE, dtype=np.int64)  # 1 us .. 1,000 s (``cohorts``)
        self._last_due = -math.inf
        self.empty = 0  # completed requests that streamed no output token
        self.reasoning_tokens = 0  # of completed requests (``RequestRecord.reasoning_tokens``)
        self.image_tokens = 0  # of completed requests' prompt tokens, where usage said them apart
        self.image_tokens_reported = 0
        self.inputs = 0  # pooling requests: the inputs their answers accounted for
        self.reasoning_counted = 0  # completed requests whose reasoning tokens were counted, not reported
        self.tool_call_turns = 0  # completed requests that answered with a tool call
        self.token_events = 0  # token events of completed requests (several tokens each, speculative)
        self.usage_per_chunk = 0  # completed requests whose every chunk said its tokens (continuous usage)
        self.trend = Trend()  # TTFT against due time (due inside the window), to see a queue that keeps growing
        self.config = config
        # multi-turn sessions: TTFT, TPOT and E2E per turn index (the history grows turn by turn)
        self.by_turn: dict[int, dict[Metric, LatencyHistogram]] = {}
        # requests split over several models (LoRA adapters): each one's outcomes and latencies
        self.by_model: dict[str, _ModelTally] = {}

    def _tally(self, model: str) -> _ModelTally:
        tally = self.by_model.get(model)
        if tally is None:
            tally = self.by_model[model] = _ModelTally(self.config)
        return tally

    @property
    def histograms(self) -> dict[Metric, LatencyHistogram]:
        """The level's histograms, with every request folded in so far recorded."""
        self._record_held()
        return self._histograms

    def _record_held(self) -> None:
        if not self._held_n:
            return
        for metric, values in self._held.items():
            if values:
                self._histograms[metric].record_many_s(np.array(values, dtype=np.float64))
                values.clear()
        if self._held_streams:
            self._histograms[Metric.ITL].record_many_s(inter_token_gaps(self._held_streams))
            self._held_streams.clear()
        self._held_n = 0

    def due(self, t_intended: float) -> None:
        """A request became due (before any slot or send): the offered load, whatever happens to it.

        The gap since the one due before it is kept (log-binned) for ``cohorts``.
        """
        if self.window_start <= t_intended <= self.window_end:
            self.offered += 1
            if self._last_due > -math.inf:
                self._due_gaps[min(_gap_bin(t_intended - self._last_due), len(self._due_gaps) - 1)] += 1
            self._last_due = max(self._last_due, t_intended)

    def cohorts(self) -> int | None:
        """A closed loop's groups of requests due together in the window; None for an open loop.

        Clients whose requests ended together send again together and share every step from then
        on (a burst start keeps them so for the whole level; past the batch cap they phase-lock), so
        a group is one sample, not many. A gap under half an evenly staggered loop's spacing
        (E2E mean / 2c), and under ``COHORT_STEPS`` engine steps (TPOT p50), joins a request to the
        group before it: a real engine's clients of one step send over a few steps' time (vLLM: up
        to ~20 ms at 6 ms a step), its waves a lifetime apart, and clients of random phases now and
        then come close without sharing a step.
        """
        e2e_us = self.histograms[Metric.E2E].mean_us()
        if self.load.kind != "concurrency" or e2e_us is None or not self.offered:
            return None
        threshold_s = e2e_us / 1e6 / (2 * self.load.value)
        step_us = self.histograms[Metric.TPOT].percentile_us(50)
        if step_us is not None:
            threshold_s = min(threshold_s, COHORT_STEPS * step_us / 1e6)
        return 1 + int(self._due_gaps[_gap_bin(threshold_s) + 1 :].sum())

    @property
    def independent_samples(self) -> float:
        """Completed requests in the window sampled for latency, a cohort counted once: what the trust
        verdict counts (``LevelResult.independent_samples``), so a request floor met is a verdict met."""
        return self.timed * independent_share(self.load, self.cohorts(), self.offered)

    def close_window(self, t: float) -> None:
        """The level stops admitting at ``t``: the measured window ends there."""
        self._advance(t)
        self.window_end = min(self.window_end, t)

    def started(self, t_sent: float) -> None:
        self._advance(t_sent)
        self.in_flight += 1

    def add(self, record: RequestRecord, *, sampled: bool = True, asked_tokens: int = 0) -> None:
        """Fold in one finished request (call it when the request ends). One not ``sampled`` (a closed
        loop's ramp round) counts toward the window's outcomes, rates and goodput, not its latencies.
        ``asked_tokens``: the max_tokens it asked for (its own draw of a length spread)."""
        self._advance(record.t_done)
        self.in_flight -= 1
        if record.error is None and record.chunk_times:
            self.window_output_tokens += self._tokens_in_window(record)
        if not self.window_start <= record.t_done <= self.window_end:
            return
        held = self._held
        t_ready = record.t_intended if record.t_slot is None else record.t_slot
        held[Metric.LAG].append(record.t_sent - t_ready)
        self._held_n += 1
        if record.t_slot is not None:
            held[Metric.QUEUE].append(record.t_slot - record.t_intended)
        tally = self._tally(record.model) if record.model is not None else None
        if record.error is not None:
            self.errors[record.error] = self.errors.get(record.error, 0) + 1
            if tally is not None:
                tally.errors[record.error] = tally.errors.get(record.error, 0) + 1
            return
        self.completed += 1
        m = request_metrics(record)
        self._count_tokens(record)
        self.asked_output_tokens += asked_tokens
        timed = bool(record.inputs) or (m.ttft_s is not None and m.ttft_sent_s is not None)
        if timed and self.goodput_limits_ms is not None and m.meets(self.goodput_limits_ms):
            self.good += 1
        self.inputs += record.inputs or 0
        if tally is not None:
            tally.add(m, sampled=sampled)
        if sampled:
            held[Metric.E2E].append(m.e2e_s)
            self.timed += 1
        if not timed:
            self.empty += 1  # a success with nothing to time: counted, and said in the caveats
            return
        if record.inputs or not sampled or m.ttft_s is None or m.ttft_sent_s is None:  # pooling: latency alone
            return
        if record.t_intended >= self.window_start:  # one due in the warm-up waited behind the start's burst
            self.trend.add(record.t_intended - self.window_start, m.ttft_s)
        held[Metric.TTFT].append(m.ttft_s)
        if record.turn is not None:
            turn = self.by_turn.setdefault(record.turn, {k: LatencyHistogram(self.config) for k in TURN_METRICS})
            turn[Metric.TTFT].record_s(m.ttft_s)
            turn[Metric.E2E].record_s(m.e2e_s)
            if m.tpot_s is not None:
                turn[Metric.TPOT].record_s(m.tpot_s)
        held[Metric.TTFT_SENT].append(m.ttft_sent_s)
        if m.ttfo_s is not None:
            held[Metric.TTFO].append(m.ttfo_s)
        if m.tpot_s is not None:
            held[Metric.TPOT].append(m.tpot_s)
        if len(record.chunk_times) >= 2:  # its gaps are computed with many others' (one array op for all)
            self._held_streams.append(record)
            self._held_n += len(record.chunk_times)
        if self._held_n >= HELD_BATCH:
            self._record_held()

    def _count_tokens(self, record: RequestRecord) -> None:
        """A completed request's prompt (and image) tokens as its usage said them, its output tokens, token
        events, reasoning tokens and tool calls: every completed request, sampled or not."""
        if record.prompt_tokens is not None:
            self.prompt_tokens += record.prompt_tokens
            self.prompt_tokens_reported += 1
        if record.image_tokens is not None:
            self.image_tokens += record.image_tokens
            self.image_tokens_reported += 1
        self.output_tokens += record.output_tokens or 0
        self.tokens_estimated |= record.output_tokens_estimated
        # counted over the same requests as the output tokens (a closed loop's unsampled first round too):
        # their ratios (tokens an event, the reasoning share) are of like with like
        self.token_events += len(record.chunk_times)
        self.usage_per_chunk += record.chunk_tokens is not None
        if record.reasoning_tokens:
            self.reasoning_tokens += record.reasoning_tokens
            self.reasoning_counted += not record.reasoning_reported
        self.tool_call_turns += record.tool_call

    def _tokens_in_window(self, record: RequestRecord) -> float:
        times = record.chunk_times
        if self.window_start <= times[0] and times[-1] <= self.window_end:  # all inside: the same sum, at once
            if record.chunk_tokens is not None:
                return float(sum(record.chunk_tokens))
            if record.output_tokens is None or record.output_tokens == len(times):  # a weight of exactly 1 each
                return float(len(times))
        if record.chunk_tokens is not None:
            weights: tuple[float, ...] | list[float] = record.chunk_tokens
        else:  # spread the server's count over the chunks (merged chunks carry several tokens)
            count = record.output_tokens if record.output_tokens is not None else len(times)  # 0 is a count
            weights = [count / len(times)] * len(times)
        lo, hi = self.window_start, self.window_end
        return float(sum(w for t, w in zip(times, weights) if lo <= t <= hi))

    def abandoned(self, t: float) -> None:
        """A request cut off in flight (interrupt or drain limit).

        Cutting happens only after the window has closed, so it is not a
        server failure; it is counted apart (``cut``), so that every request
        sent has an outcome: completed, failed, or cut.
        """
        self._advance(t)
        self.in_flight -= 1
        self.cut += 1

    def snapshot(self) -> LiveSnapshot:
        h = self.histograms

        def ms(metric: Metric, p: float) -> float | None:
            v = h[metric].percentile_us(p)
            return None if v is None else v / 1000.0

        return LiveSnapshot(
            completed=self.completed,
            failed=sum(self.errors.values()),
            in_flight=self.in_flight,
            output_tokens=self.output_tokens,
            ttft_p50_ms=ms(Metric.TTFT, 50),
            ttft_p95_ms=ms(Metric.TTFT, 95),
            tpot_p50_ms=ms(Metric.TPOT, 50),
            tpot_p95_ms=ms(Metric.TPOT, 95),
            window_output_tokens=self.window_output_tokens,
            e2e_p50_ms=ms(Metric.E2E, 50) if self.inputs else None,
            e2e_p95_ms=ms(Metric.E2E, 95) if self.inputs else None,
        )

    def finish(self, t_end: float, *, server: ServerSample | None = None, complete: bool = True) -> LevelResult:
        """Close the level at ``t_end`` (or at the window's end if earlier)."""
        end = min(t_end, self.window_end)
        self._advance(end)
        window_s = max(0.0, end - self.window_start)
        return LevelResult(
            load=self.load,
            window_s=window_s,
            completed=self.completed,
            errors=dict(self.errors),
            output_tokens=self.output_tokens,
            window_output_tokens=self.window_output_tokens,
            prompt_tokens=self.prompt_tokens,
            prompt_tokens_reported=self.prompt_tokens_reported,
            tokens_estimated=self.tokens_estimated,
            achieved_concurrency=self._area / window_s if window_s > 0 else 0.0,
            histograms=self.histograms,
            lag_threshold_ms=self.lag_threshold_ms,
            server=server,
            complete=complete,
            good=self.good if self.goodput_limits_ms is not None else None,
            offered=self.offered,
            cohorts=self.cohorts(),
            cut=self.cut,
            ttft_trend=self.trend.as_tuple(),
            empty=self.empty,
            reasoning_tokens=self.reasoning_tokens,
            image_tokens=self.image_tokens,
            image_tokens_reported=self.image_tokens_reported,
            inputs=self.inputs,
            reasoning_counted=self.reasoning_counted,
            tool_call_turns=self.tool_call_turns,
            token_events=self.token_events,
            asked_output_tokens=self.asked_output_tokens,
            usage_per_chunk=self.usage_per_chunk,
            by_turn=dict(sorted(self.by_turn.items())) or None,
            by_model={name: t.breakdown() for name, t in sorted(self.by_model.items())} or None,
        )

    def _advance(self, t: float) -> None:
        """Accumulate in-flight request-seconds, clipped to the window."""
        lo = max(self._last_t, self.window_start)
        hi = min(t, self.window_end)
        if hi > lo:
            self._area += self.in_flight * (hi - lo)
        self._last_t = max(self._last_t, t)


@dataclass(slots=True, kw_only=True)  # built once per request: not frozen (object.__setattr__ per field), never changed
class RequestMetrics:
    """One successful request's metrics, in seconds: the one place they are computed.

    The histograms record these values and goodput judges these same values,
    so a request's TPOT or ITL can never be one number in a percentile and
    another in its goodput verdict.
    """

    e2e_s: float  # t_done - t_intended
    ttft_s: float | None  # t_first - t_intended (None: no output arrived)
    ttft_sent_s: float | None  # t_first - t_sent
    tpot_s: float | None  # (t_last - t_first) / (tokens - 1); None under 2 tokens
    ttfo_s: float | None  # t_first_output - t_intended: the first answer token (None: reasoning only, or none)
    record: RequestRecord  # its token events: ``itl_s``, computed when asked (the recorder pools them)

    @property
    def itl_s(self) -> np.ndarray:
        """The gaps between its token events (``inter_token_gaps``)."""
        return inter_token_gaps((self.record,))

    def meets(self, limits_ms: Mapping[Metric, float]) -> bool:
        """Whether this request met every per-request limit (goodput); ITL is its largest gap."""
        values = {
            Metric.TTFT: self.ttft_s,
            Metric.TTFT_SENT: self.ttft_sent_s,
            Metric.TTFO: self.ttfo_s,
            Metric.E2E: self.e2e_s,
            Metric.TPOT: self.tpot_s,
        }
        if Metric.ITL in limits_ms:
            itl = self.itl_s
            values[Metric.ITL] = float(itl.max()) if itl.size else None
        for metric, limit_ms in limits_ms.items():
            value = values.get(metric)
            if value is not None and value * 1000.0 > limit_ms:
                return False
        return True


def request_metrics(record: RequestRecord) -> RequestMetrics:
    """The per-request metrics (docs/design.md) of a successful request."""
    tokens = record.output_tokens or 0
    # the server's usage saying 0 output tokens outweighs an empty delta: nothing was generated to time
    first, last = (None, None) if record.output_tokens == 0 else (record.t_first, record.t_last)
    return RequestMetrics(
        e2e_s=record.t_done - record.t_intended,
        ttft_s=None if first is None else first - record.t_intended,
        ttft_sent_s=None if first is None else first - record.t_sent,
        tpot_s=(last - first) / (tokens - 1) if first is not None and last is not None and tokens >= 2 else None,
        ttfo_s=None if first is None or record.t_first_output is None else record.t_first_output - record.t_intended,
        record=record,
    )


def inter_token_gaps(records: Sequence[RequestRecord]) -> np.ndarray:
    """The gaps between consecutive token events of each record, pooled (ITL, seconds).

    A chunk the server says held n tokens (vLLM's continuous usage) is n gaps of its gap / n. The
    records' event times are subtracted in one array, the gap across two records dropped: a
    request's own handful of numpy calls cost more than its gaps (one call per request was ~2% of
    the client's CPU at 256 streams).
    """
    plain = [r.chunk_times for r in records if r.chunk_tokens is None and len(r.chunk_times) >= 2]
    lengths = np.fromiter(map(len, plain), np.int64, len(plain))
    times = np.fromiter(itertools.chain.from_iterable(plain), np.float64, int(lengths.sum()))
    keep = np.ones(max(times.size - 1, 0), dtype=bool)
    keep[np.cumsum(lengths)[:-1] - 1] = False  # from one record's last event to the next one's first
    pooled = [(times[1:] - times[:-1])[keep]]
    for r in records:
        if r.chunk_tokens is not None and len(r.chunk_times) >= 2:
            gaps = np.diff(np.asarray(r.chunk_times, dtype=np.float64))
            n = np.maximum(np.asarray(r.chunk_tokens[1:]), 1)
            pooled.append(np.repeat(gaps / n, n))
    return pooled[0] if len(pooled) == 1 else np.concatenate(pooled)


def _gap_bin(seconds: float) -> int:
    """The due-gap histogram's bin of a gap (bin 0 holds everything under ``GAP_BINS_FROM_S``)."""
    return 0 if seconds < GAP_BINS_FROM_S else int(math.log10(seconds / GAP_BINS_FROM_S) * GAP_BINS_PER_DECADE)


class _ModelTally:
    """One model's requests in the window: completed, failed by kind, and TURN_METRICS' histograms."""

    __slots__ = ("completed", "errors", "histograms")

    def __init__(self, config: HistogramConfig) -> None:
        self.completed = 0
        self.errors: dict[ErrorKind, int] = {}
        self.histograms = {k: LatencyHistogram(config) for k in TURN_METRICS}

    def add(self, m: RequestMetrics, *, sampled: bool = True) -> None:
        self.completed += 1
        if not sampled:
            return
        self.histograms[Metric.E2E].record_s(m.e2e_s)
        if m.ttft_s is not None:
            self.histograms[Metric.TTFT].record_s(m.ttft_s)
        if m.tpot_s is not None:
            self.histograms[Metric.TPOT].record_s(m.tpot_s)

    def breakdown(self) -> ModelBreakdown:
        return ModelBreakdown(self.completed, dict(self.errors), self.histograms)
