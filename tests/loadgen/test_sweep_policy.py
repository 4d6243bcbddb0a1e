"""The sweep's stop policy and saturation flags, on plain numbers."""

from __future__ import annotations

from loadgen.histogram import LatencyHistogram
from loadgen.profile import StopSpec
from loadgen.results import LevelResult, Load, Metric, SloTarget
from loadgen.sweep import saturated_flags, stop_reason


def level(c: int, tok_s: float, tpot_ms: float) -> LevelResult:
    hists = {m: LatencyHistogram() for m in Metric}
    hists[Metric.TPOT].record_us(int(tpot_ms * 1000))
    return LevelResult(Load("concurrency", c), 10.0, 10, {}, 100, tok_s * 10, 0, 0, False, c, hists)


def test_saturation_is_a_gain_below_the_threshold() -> None:
    levels = [level(8, 280, 28), level(16, 520, 31), level(32, 846, 37.8), level(64, 850, 37.8), level(128, 845, 37.8)]
    assert saturated_flags(levels, 0.10) == [False, False, False, True, True]
    assert saturated_flags(levels, None) == [False] * 5


def test_stop_on_saturation_or_not() -> None:
    levels = [level(32, 846, 37.8), level(64, 850, 37.8)]
    assert "saturated" in (stop_reason(levels, (), StopSpec()) or "")
    assert stop_reason(levels, (), StopSpec(stop_on_saturation=False)) is None


def test_stop_on_a_bad_slo_breach_only() -> None:
    slo = (SloTarget(Metric.TPOT, 95, 30.0),)
    assert stop_reason([level(8, 280, 45)], slo, StopSpec()) is None  # 1.5x over: keep going
    reason = stop_reason([level(8, 280, 61)], slo, StopSpec())
    assert reason is not None and "tpot_p95_ms" in reason and "2x" in reason
    assert stop_reason([level(8, 280, 61)], slo, StopSpec(slo_breach_factor=None)) is None
