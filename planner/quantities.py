"""Named per-level quantities (``tpot_p95``, ``error_rate``, ``output_tokens_per_s`` ...) and their values (pure).

Shared by the gate's grammar and the baseline comparison, so a quantity
means the same thing in both.
"""

from __future__ import annotations

import re

from loadgen.results import LevelResult, Metric

LATENCY = re.compile(r"^(ttft_sent|ttft|tpot|itl|e2e|queue|lag)_(p\d+(?:\.\d+)?|mean|max)$")
RATIOS = ("error_rate", "goodput_ratio")
RATES = ("output_tokens_per_s", "requests_per_s", "achieved_concurrency")


def latency_parts(quantity: str) -> tuple[Metric, str] | None:
    """``tpot_p95`` -> (TPOT, "p95"); None for a quantity that is not a latency."""
    m = LATENCY.match(quantity)
    return (Metric(m.group(1)), m.group(2)) if m else None


def quantity_value(level: LevelResult, quantity: str) -> float | None:
    """The level's value (ms for latencies), or None when it has no data for it."""
    if quantity in RATIOS + RATES:
        value: float | None = getattr(level, quantity)  # each is a LevelResult property of that name
        return value
    parts = latency_parts(quantity)
    if parts is None:
        raise ValueError(f"unknown quantity {quantity!r}")
    metric, stat = parts
    hist = level.histograms[metric]
    value = hist.mean_us() if stat == "mean" else hist.max_us() if stat == "max" else hist.percentile_us(float(stat[1:]))
    return None if value is None else value / 1000.0
