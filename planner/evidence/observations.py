"""Per-level observations from a results file: the planner's only view of loadgen (pure).

The batch axis is, in order of preference: the server's own mean running
batch (scraped), else the Little's-law decoding batch
``b = X_req * mean(E2E - TTFT)`` (requests in their decode phase), else the
achieved concurrency. One source for the whole sweep, and it is said which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from loadgen.level.aggregates import mean_output_tokens, mean_prompt_tokens
from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results

BatchSource = Literal["server", "littles_law", "concurrency"]
LITTLE_TOLERANCE = 0.05
Z95 = 1.959964


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelObservation:
    label: str
    concurrency: float  # achieved (time-weighted in flight)
    batch: float  # on the sweep's batch axis
    completed: int
    error_rate: float | None
    requests_per_s: float | None
    tokens_per_s: float | None
    tpot_mean_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None
    tpot_p99_ms: float | None
    ttft_p50_ms: float | None
    ttft_sent_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p95_ms: float | None
    itl_p99_ms: float | None
    e2e_mean_ms: float | None
    server_waiting: float | None
    littles_ratio: float | None  # achieved concurrency / (X_req * mean E2E): 1 when nothing is lost
    client_bound: bool
    tokens_estimated: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Observations:
    levels: tuple[LevelObservation, ...]
    results: tuple[LevelResult, ...]  # the same levels, for percentiles at any SLO
    batch_source: BatchSource
    prompt_tokens_mean: float | None
    output_tokens_mean: float | None
    warnings: tuple[str, ...]


def _mean_ms(level: LevelResult, metric: Metric) -> float | None:
    return level.mean_ms(metric)


def _littles_batch(level: LevelResult) -> float | None:
    """Sequences decoding at once by Little's law: requests/s x (E2E - TTFT), each request's decode time.

    Without E2E (a vendor's table of TTFT, ITL and tok/s) the same law on tokens: each decoding
    sequence emits one token per TPOT, so output tok/s x mean TPOT sequences are decoding.
    """
    e2e, ttft, x = _mean_ms(level, Metric.E2E), _mean_ms(level, Metric.TTFT), level.requests_per_s
    if e2e is not None and ttft is not None and x:
        return x * (e2e - ttft) / 1000.0
    tpot, tokens = _mean_ms(level, Metric.TPOT), level.output_tokens_per_s
    if e2e is None and tpot is not None and tokens:
        return tokens * tpot / 1000.0
    return None


def from_results(results: Results) -> Observations:
    """Observations of every level of a run or sweep, in load order."""
    return observe(results.levels)


def observe(measured: Sequence[LevelResult]) -> Observations:
    """Observations of these levels (a sweep so far, or a whole results file), in load order."""
    levels = tuple(sorted(measured, key=lambda lv: lv.load.value))
    if not levels:
        raise ValueError("the results file has no levels")
    source: BatchSource
    if all(lv.server is not None and lv.server.running_mean is not None for lv in levels):
        source = "server"
    elif all(_littles_batch(lv) is not None for lv in levels):
        source = "littles_law"
    else:
        source = "concurrency"
    rows, warnings = [], []
    for lv in levels:
        row, warning = _observe_level(lv, source)
        rows.append(row)
        warnings += [warning] if warning else []
    return Observations(
        levels=tuple(rows),
        results=levels,
        batch_source=source,
        prompt_tokens_mean=mean_prompt_tokens(levels),
        output_tokens_mean=mean_output_tokens(levels),
        warnings=tuple(warnings),
    )


def _observe_level(lv: LevelResult, source: BatchSource) -> tuple[LevelObservation, str | None]:
    """One level's observation on the batch axis ``source``, and a warning where Little's law is off."""
    batch = (
        lv.server.running_mean
        if source == "server" and lv.server
        else _littles_batch(lv)
        if source == "littles_law"
        else lv.achieved_concurrency
    )
    e2e = _mean_ms(lv, Metric.E2E)
    ratio, warning = None, None
    if e2e and lv.requests_per_s:
        ratio = lv.achieved_concurrency / (lv.requests_per_s * e2e / 1000.0)
        if abs(ratio - 1) > littles_tolerance(lv, e2e):
            warning = (
                f"{lv.load.label}: Little's law off by {ratio - 1:+.0%} (concurrency "
                f"{lv.achieved_concurrency:.1f} vs X*E2E {lv.requests_per_s * e2e / 1000:.1f}): "
                + littles_cause(lv, e2e)
            )
    row = LevelObservation(
        label=lv.load.label,
        concurrency=lv.achieved_concurrency,
        batch=float(batch or 0.0),
        completed=lv.completed,
        error_rate=lv.error_rate,
        requests_per_s=lv.requests_per_s,
        tokens_per_s=lv.prompt_tokens_per_s if lv.pooling else lv.output_tokens_per_s,  # pooling: prompts served
        tpot_mean_ms=_mean_ms(lv, Metric.TPOT),
        tpot_p50_ms=lv.percentile_ms(Metric.TPOT, 50),
        tpot_p95_ms=lv.percentile_ms(Metric.TPOT, 95),
        tpot_p99_ms=lv.percentile_ms(Metric.TPOT, 99),
        ttft_p50_ms=lv.percentile_ms(Metric.TTFT, 50),
        ttft_sent_p50_ms=lv.percentile_ms(Metric.TTFT_SENT, 50),
        ttft_p95_ms=lv.percentile_ms(Metric.TTFT, 95),
        itl_p95_ms=lv.percentile_ms(Metric.ITL, 95),
        itl_p99_ms=lv.percentile_ms(Metric.ITL, 99),
        e2e_mean_ms=e2e,
        server_waiting=lv.server.waiting_mean if lv.server else None,
        littles_ratio=ratio,
        client_bound=lv.client_bound,
        tokens_estimated=lv.tokens_estimated,
    )
    return row, warning


GROWTH_SHARE_OF_E2E = 0.25  # a TTFT rise across the window beyond a quarter of a request's lifetime...
GROWTH_T = 4.0  # ...and this many standard errors of the trend (requests share a queue: be strict)


def queue_growth_s(level: LevelResult) -> float | None:
    """How much TTFT rose across the window when it rose materially and significantly (a growing queue)."""
    growth = level.ttft_growth_s()
    e2e_us = level.histograms[Metric.E2E].mean_us()
    if growth is None or e2e_us is None:
        return None
    rise, se = growth
    return rise if rise > GROWTH_SHARE_OF_E2E * e2e_us / 1e6 and rise > GROWTH_T * se else None


def littles_tolerance(level: LevelResult, e2e_ms: float) -> float:
    """How far ``L = X * W`` may miss in a finite window: requests straddling its edges (about E2E/window)
    and the count's own noise (``2/sqrt(n)``), at least ``LITTLE_TOLERANCE``."""
    edges = e2e_ms / 1000.0 / level.window_s if level.window_s > 0 else 1.0
    return max(LITTLE_TOLERANCE, edges + 2.0 / math.sqrt(max(level.completed, 1)))


def littles_cause(level: LevelResult, e2e_ms: float) -> str:
    """The likeliest reason a level misses Little's law, named (not a list of guesses)."""
    if level.window_s < 3 * e2e_ms / 1000.0:
        return f"the window ({level.window_s:.1f} s) is short against E2E ({e2e_ms / 1000:.1f} s)"
    if queue_growth_s(level) is not None:
        return "the level is not steady (TTFT rose across the window)"
    if level.failed:
        return f"{level.failed} failed requests hold slots but count in no latency"
    if level.client_bound:
        return "the load generator is the bottleneck (client-bound)"
    return "requests were lost from the window (cancelled at the drain limit)"


def percentile_ci_ms(level: LevelResult, metric: Metric, percentile: float) -> tuple[float, float] | None:
    """Distribution-free 95% interval of a percentile from order statistics (binomial ranks).

    The ranks' spread comes from the number of *independent* samples
    (``LevelResult.independent_samples``: one per engine step for ITL).
    Requests in one level still share steps, so
    this understates the real uncertainty (methodology §2.7): a lower bound.
    """
    h = level.histograms[metric]
    n = h.count
    if n == 0:
        return None
    p = percentile / 100.0
    half = (
        Z95 * math.sqrt(p * (1 - p) / max(level.independent_samples(metric), 1.0)) * n
    )  # in ranks of the n recorded samples
    lo_rank = max(1, math.floor(n * p - half))
    hi_rank = min(n, math.ceil(n * p + half) + 1)
    lo, hi = h.percentile_us(100.0 * lo_rank / n), h.percentile_us(100.0 * hi_rank / n)
    assert lo is not None and hi is not None
    return lo / 1000.0, hi / 1000.0
