"""Named per-level quantities (``tpot_p95``, ``error_rate``, ``output_tokens_per_s`` ...) and their values (pure).

Shared by the gate's grammar and the baseline comparison, so a quantity
means the same thing in both. Latency names are ``loadgen.quantity``'s.
"""

from __future__ import annotations

from loadgen.level.result import LevelResult
from loadgen.quantity import Quantity

RATIOS = ("error_rate", "goodput_ratio")
RATES = ("output_tokens_per_s", "requests_per_s", "achieved_concurrency")


def latency_quantity(name: str) -> Quantity | None:
    """``tpot_p95`` -> its Quantity; None for a name that is not a latency (``error_rate``)."""
    if name in RATIOS + RATES:
        return None
    try:
        return Quantity.parse(name)
    except ValueError:
        return None


def quantity_value(level: LevelResult, name: str) -> float | None:
    """The level's value (ms for latencies), or None when it has no data for it."""
    if name in RATIOS + RATES:
        value: float | None = getattr(level, name)  # each is a LevelResult property of that name
        return value
    return level.statistic_ms(Quantity.parse(name))
