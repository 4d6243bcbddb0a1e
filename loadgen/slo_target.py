"""An SLO: one latency promise (``tpot_p95_ms: 50``) or an error budget (``error_rate: 0.01``), and the one
reader of its key, for profiles, results files and ``--slo`` alike (pure).

It lives beside the results contract, not in it: a results file stores a profile's SLOs as keys and
numbers, and every reader of them comes here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from loadgen.level.result import LevelResult
from loadgen.quantity import Aggregate, Metric, Quantity, samples_needed

#: The latencies an SLO may promise.
SLO_METRICS: Final = (Metric.TTFT, Metric.TTFT_SENT, Metric.TTFO, Metric.TPOT, Metric.ITL, Metric.E2E)


@dataclass(frozen=True, slots=True, kw_only=True)
class SloTarget:
    """One latency promise (``tpot_p95_ms: 50``) or an error budget (``error_rate: 0.01``).

    Keys are a percentile quantity's key plus ``_ms`` (``loadgen.quantity``):
    ``tpot_p99.9_ms`` (or the older ``tpot_p999_ms``) is the 99.9th percentile.
    """

    metric: Metric | None  # None: the error rate
    percentile: float | None  # None with ``mean``: the mean; None without a metric: the error rate
    limit: float  # ms for latency, a fraction for the error rate
    mean: bool = False  # a promise on the mean (``tpot_mean_ms``: what vendors' tables publish)

    @property
    def quantity(self) -> Quantity | None:
        if self.metric is None:
            return None
        if self.mean:
            return Quantity(self.metric, aggregate=Aggregate.MEAN)
        return Quantity(self.metric, self.percentile)

    @property
    def key(self) -> str:
        return "error_rate" if self.quantity is None else f"{self.quantity.key}_ms"

    @property
    def samples_needed(self) -> int:
        """Samples a level needs before this SLO's percentile is bounded (0 for the error rate)."""
        return 0 if self.percentile is None else samples_needed(self.percentile)

    @classmethod
    def from_key(cls, key: str, limit: float) -> SloTarget:
        """The one reader of an SLO's key, for profiles and ``--slo`` alike (ValueError names what is allowed)."""
        if key == "error_rate":
            if not 0 <= limit <= 1:
                raise ValueError(f"error_rate must be a fraction in [0, 1], got {limit}")
            return cls(metric=None, percentile=None, limit=limit)
        try:
            if not key.endswith("_ms"):
                raise ValueError(key)
            quantity = Quantity.parse(key.removesuffix("_ms"))
        except ValueError:
            quantity = None
        if quantity is None or quantity.metric not in SLO_METRICS:
            raise ValueError(
                "unknown SLO key: expected error_rate, METRIC_pNN_ms or METRIC_mean_ms with METRIC one of "
                f"{', '.join(m.value for m in SLO_METRICS)} (e.g. tpot_p95_ms, ttft_p99.9_ms, tpot_mean_ms)"
            )
        if quantity.aggregate == Aggregate.MAX:
            raise ValueError(
                f"SLO key {key!r}: an SLO takes a percentile or the mean (e.g. {quantity.metric.value}_p95_ms)"
            )
        return cls(
            metric=quantity.metric,
            percentile=quantity.percentile,
            limit=limit,
            mean=quantity.aggregate == Aggregate.MEAN,
        )

    def value(self, level: LevelResult) -> float | None:
        """This level's value of the metric (ms, or a fraction); None when there is no data."""
        quantity = self.quantity
        return level.error_rate if quantity is None else level.statistic_ms(quantity)

    def met_by(self, level: LevelResult) -> bool | None:
        value = self.value(level)
        return None if value is None else value <= self.limit
