"""Demand over time for a fleet plan: requests/s per bucket, from a constant, a rate series or a trace (pure).

A fleet is sized bucket by bucket, so demand is a step function: the mean arrival rate in each
bucket of ``bucket_s`` seconds. A trace keeps its own arrival times as well, so the replay that
checks the plan (``planner.fleet.fleet_replay``) serves the requests that really came, with their
bursts inside a bucket, not only each bucket's mean.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ONE_HOUR_S = 3600.0
MAX_BUCKETS = 100_000  # a month of minutes: the plan and its replay hold one row per bucket


@dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    """Mean requests/s in each bucket of ``bucket_s`` seconds, and the arrivals they came from where known."""

    bucket_s: float
    rates: tuple[float, ...]
    source: str
    arrivals_s: tuple[float, ...] | None = None  # a trace's own arrival times (s from its start); None: rates only

    def __post_init__(self) -> None:
        if not self.bucket_s > 0 or not self.rates or min(self.rates) < 0:
            raise ValueError("demand needs a bucket longer than 0 s and one rate >= 0 per bucket")
        if len(self.rates) > MAX_BUCKETS:
            raise ValueError(f"{len(self.rates):,} buckets: at most {MAX_BUCKETS:,} (use a longer bucket)")

    @property
    def period_s(self) -> float:
        return self.bucket_s * len(self.rates)

    @property
    def peak_rps(self) -> float:
        return max(self.rates)

    @property
    def mean_rps(self) -> float:
        return float(np.mean(self.rates))


def bucket_count(span_s: float, bucket_s: float) -> int:
    """How many buckets cover ``span_s`` seconds: checked against ``MAX_BUCKETS`` before any array is sized
    by it (a row at 10^15 s, or a bucket of 0.1 ms over hours, once allocated gigabytes first)."""
    n = span_s / bucket_s
    if not math.isfinite(n) or n > MAX_BUCKETS:
        raise ValueError(
            f"{span_s:,.6g} s in buckets of {bucket_s:g} s is more than {MAX_BUCKETS:,} buckets (use a longer bucket)"
        )
    return max(1, math.ceil(n - 1e-9))


def constant_demand(qps: float) -> Demand:
    """A steady ``qps`` for one hour: one bucket, so the fleet's figures are per hour."""
    return Demand(bucket_s=ONE_HOUR_S, rates=(qps,), source=f"a constant {qps:g} requests/s (costed for one hour)")


def demand_from_arrivals(offsets_s: Sequence[float], bucket_s: float, source: str) -> Demand:
    """Arrivals (s from the first, sorted) counted per bucket; the last bucket is the one the last arrival is in."""
    times = np.asarray(offsets_s, dtype=np.float64)
    if not len(times):
        raise ValueError("a trace needs at least one request")
    if times[0] < 0 or np.any(np.diff(times) < 0):
        raise ValueError("a trace's arrival times must start at 0 or later and never go back")
    bucket_count(float(times[-1]) + bucket_s, bucket_s)  # bounded before the counts are allocated
    index = np.floor(times / bucket_s).astype(np.int64)
    counts = np.bincount(index, minlength=int(index[-1]) + 1)
    return Demand(
        bucket_s=bucket_s,
        rates=tuple(float(c) / bucket_s for c in counts),
        source=source,
        arrivals_s=tuple(float(t) for t in times),
    )


def demand_from_series(times_s: Sequence[float], qps: Sequence[float], bucket_s: float, source: str) -> Demand:
    """A rate series (each row's rate holds until the next row; the last for as long as the step before it,
    or one bucket when there is one row) averaged over each bucket, exactly."""
    if not len(times_s) or len(times_s) != len(qps):
        raise ValueError("a rate series needs at least one row, each with a time and a rate")
    if any(b <= a for a, b in itertools.pairwise(times_s)):
        raise ValueError("a rate series' times must increase from row to row")
    last_step = times_s[-1] - times_s[-2] if len(times_s) > 1 else bucket_s
    n = bucket_count(times_s[-1] + last_step - times_s[0], bucket_s)  # bounded before anything is allocated
    edges = np.asarray([*times_s, times_s[-1] + last_step], dtype=np.float64) - times_s[0]
    # the integral of the step function from 0 to each edge, then to each bucket boundary by interpolation
    cumulative = np.concatenate(([0.0], np.cumsum(np.diff(edges) * np.asarray(qps, dtype=np.float64))))
    bounds = np.minimum(np.arange(n + 1) * bucket_s, edges[-1])
    served = np.interp(bounds, edges, cumulative)
    widths = np.diff(bounds)  # the last bucket may be cut short by the series' end: its mean is over what it covers
    return Demand(bucket_s=bucket_s, rates=tuple(float(v) for v in np.diff(served) / widths), source=source)
