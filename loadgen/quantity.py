"""Latency metrics and their statistics, named and parsed in one place (pure).

A quantity is a metric with a statistic: ``tpot_p95``, ``ttft_p99.9``,
``e2e_mean``, ``lag_max``. Profiles (``tpot_p95_ms: 50``), ``--slo``, the
gate's checks and comparisons all spell and read it through
``Quantity.parse`` and ``Quantity.key``, so ``p99.9`` means the 99.9th
percentile everywhere. Three digits without a point are the older
compact spelling of a tenth (``p999`` = 99.9, ``p995`` = 99.5) and still
read; the canonical key writes the point.

``samples_needed`` is the one rule for when a percentile is resolvable:
the sweep's request floor, the trust verdict and the gate all use it.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

#: the default p99 of ``Metric.LAG`` (ms) past which a level measured its client: client-bound
LAG_THRESHOLD_MS = 10.0


class Metric(enum.StrEnum):
    """Per-request latency metrics (docs/design.md; computed in ``loadgen.run.metrics``)."""

    TTFT = "ttft"  # t_first - t_intended
    TTFT_SENT = "ttft_sent"  # t_first - t_sent
    TTFO = "ttfo"  # t_first_output - t_intended: the first answer token (content or a tool call, not reasoning)
    TPOT = "tpot"  # (t_last - t_first) / (output_tokens - 1)
    ITL = "itl"  # each gap between token events, pooled
    E2E = "e2e"  # t_done - t_intended
    QUEUE = "queue"  # t_slot - t_intended (open loop with an in-flight cap)
    LAG = "lag"  # t_sent - max(t_intended, t_slot): the generator's own slip


class Aggregate(enum.StrEnum):
    MEAN = "mean"
    MAX = "max"


PER_REQUEST = frozenset({Metric.TTFT, Metric.TTFT_SENT, Metric.TTFO, Metric.TPOT, Metric.E2E, Metric.QUEUE, Metric.LAG})
_METRICS = "|".join(sorted((m.value for m in Metric), key=len, reverse=True))  # ttft_sent before ttft
_NAME = re.compile(rf"^(?P<metric>{_METRICS})_(?:p(?P<pct>\d+(?:\.\d+)?)|(?P<agg>mean|max))$")
EXPECTED = f"METRIC_pNN, METRIC_mean or METRIC_max with METRIC one of {', '.join(m.value for m in Metric)}"


@dataclass(frozen=True, slots=True)
class Quantity:
    """One statistic of one latency metric: a percentile in (0, 100), the mean, or the maximum."""

    metric: Metric
    percentile: float | None = None
    aggregate: Aggregate | None = None

    def __post_init__(self) -> None:
        if (self.percentile is None) == (self.aggregate is None):
            raise ValueError("a quantity is a percentile or an aggregate, exactly one")
        if self.percentile is not None and not (math.isfinite(self.percentile) and 0 < self.percentile < 100):
            raise ValueError(f"a percentile must be between 0 and 100, got {self.percentile:g}")

    @property
    def key(self) -> str:
        """``tpot_p95``, ``ttft_p99.9``, ``e2e_mean``: what ``parse`` reads back."""
        stat = f"p{self.percentile:g}" if self.percentile is not None else str(self.aggregate)
        return f"{self.metric.value}_{stat}"

    @classmethod
    def parse(cls, name: str) -> Quantity:
        """Read a quantity's name; ValueError names what was expected."""
        m = _NAME.match(name.strip())
        if not m:
            raise ValueError(f"{name!r} is not a latency quantity: expected {EXPECTED} (e.g. tpot_p95, ttft_p99.9)")
        metric = Metric(m.group("metric"))
        if m.group("agg"):
            return cls(metric, aggregate=Aggregate(m.group("agg")))
        digits = m.group("pct")
        legacy = len(digits) == 3 and digits.isdigit() and digits.startswith("9")  # p999 -> 99.9
        percentile = float(digits) / 10 if legacy else float(digits)
        return cls(metric, percentile=percentile)


def samples_needed(percentile: float) -> int:
    """Fewest samples whose maximum bounds the percentile with 95% confidence: ``p^n <= 0.05``.

    A p95 needs 59, a p99 299, a p99.9 2,995; a median 5.

    >>> samples_needed(95), samples_needed(99), samples_needed(50)
    (59, 299, 5)
    """
    p = percentile / 100.0
    return math.ceil(math.log(0.05) / math.log(p))
