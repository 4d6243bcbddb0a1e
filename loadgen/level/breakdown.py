"""What a level breaks down into: a TTFT trend over the window, each model's part, each turn's histograms."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from loadgen.errors import ErrorKind
from loadgen.histogram import DEFAULT_CONFIG, HistogramConfig, LatencyHistogram
from loadgen.quantity import Metric

TURN_METRICS: Final = (Metric.TTFT, Metric.TPOT, Metric.E2E)  # recorded per turn of a conversation


def empty_histograms(config: HistogramConfig = DEFAULT_CONFIG) -> dict[Metric, LatencyHistogram]:
    return {m: LatencyHistogram(config) for m in Metric}


def merged_histograms(shares: Sequence[Mapping[Metric, LatencyHistogram]]) -> dict[Metric, LatencyHistogram]:
    """Histograms of the same quantities merged exactly (HDR histograms add bucket by bucket)."""
    merged: dict[Metric, LatencyHistogram] = {}
    for hists in shares:
        for m, h in hists.items():
            if m in merged:
                merged[m].merge(h)
            else:
                merged[m] = h.copy()
    return merged


def added_counts(shares: Sequence[Mapping[ErrorKind, int]]) -> dict[ErrorKind, int]:
    """Counts by kind, added kind by kind."""
    out: dict[ErrorKind, int] = {}
    for counts in shares:
        for kind, n in counts.items():
            out[kind] = out.get(kind, 0) + n
    return out


@dataclass(slots=True, kw_only=True)
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

    @classmethod
    def from_sums(cls, sums: Sequence[float]) -> Trend:
        """The statistics as a level stores them (``LevelResult.ttft_trend``), in field order."""
        return cls(**dict(zip((f.name for f in fields(cls)), sums, strict=True)))

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


@dataclass(frozen=True, slots=True)
class ModelBreakdown:
    """One model's part of a level whose requests named several (LoRA adapters behind one endpoint): its
    requests' outcomes and the per-request latencies (``TURN_METRICS``) of those that completed."""

    completed: int
    errors: Mapping[ErrorKind, int]
    histograms: Mapping[Metric, LatencyHistogram]

    def merged(self, other: ModelBreakdown) -> ModelBreakdown:
        return ModelBreakdown(
            self.completed + other.completed,
            added_counts([self.errors, other.errors]),
            merged_histograms([self.histograms, other.histograms]),
        )

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


def merged_models(shares: Sequence[Mapping[str, ModelBreakdown] | None]) -> dict[str, ModelBreakdown] | None:
    """Each model's part of a split level, merged model by model (None: no share split its requests)."""
    models: dict[str, ModelBreakdown] = {}
    for share in shares:
        for name, part in (share or {}).items():
            models[name] = models[name].merged(part) if name in models else part
    return dict(sorted(models.items())) or None


def merged_turns(
    shares: Sequence[Mapping[int, Mapping[Metric, LatencyHistogram]] | None],
) -> dict[int, dict[Metric, LatencyHistogram]] | None:
    """Per-turn histograms of a multi-turn level, merged turn by turn."""
    turns: dict[int, list[Mapping[Metric, LatencyHistogram]]] = {}
    for share in shares:
        for t, hists in (share or {}).items():
            turns.setdefault(t, []).append(hists)
    return {t: merged_histograms(turns[t]) for t in sorted(turns)} or None
