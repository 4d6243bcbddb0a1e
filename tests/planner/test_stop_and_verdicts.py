"""One verdict per level: saturation from several signals, trust from one floor, and the sweep's stop rule."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.level.breakdown import Trend
from loadgen.level.result import LevelResult
from loadgen.load import Load
from loadgen.quantity import Metric, Quantity
from loadgen.slo_target import SloTarget
from planner.ci.stop import stop_reason
from planner.evidence.verdicts import judge
from tests.planner.synthetic import closed_level, law_sweep, law_tpots

NO_KNEE = law_sweep(12.0, 1.1, 48, (1, 2, 4, 8, 16, 24, 32, 40))
KNEE = law_sweep(25.0, 0.4, 24, (1, 2, 4, 8, 16, 24, 32, 48, 64))


def test_a_slope_that_flattens_throughput_is_not_saturation() -> None:
    # step 12 + 1.1b: c=32 -> 40 gains only 5% throughput, with no queue and 48 slots
    gains = [b.output_tokens_per_s / a.output_tokens_per_s - 1 for a, b in itertools.pairwise(NO_KNEE)]  # type: ignore[operator]
    assert min(gains) < 0.10
    assert all(v.state == "unsaturated" for v in judge(NO_KNEE).levels)
    assert all(stop_reason(NO_KNEE[: k + 1], ()) is None for k in range(len(NO_KNEE)))


def test_past_the_batch_cap_levels_are_saturated_and_the_sweep_stops() -> None:
    states = [v.state for v in judge(KNEE).levels]
    assert states[:5] == ["unsaturated"] * 5 and states[-2:] == ["saturated", "saturated"]
    stops = [k for k in range(len(KNEE)) if stop_reason(KNEE[: k + 1], ())]
    assert stops and KNEE[stops[0]].load.value in (32, 48)
    assert "saturated" in (stop_reason(KNEE[: stops[0] + 1], ()) or "")
    assert stop_reason(KNEE, (), stop_on_saturation=False) is None


def test_the_throughput_heuristic_is_opt_in_and_needs_two_low_gains() -> None:
    reason = stop_reason(NO_KNEE, (), min_throughput_gain=0.10)
    assert reason is not None and "throughput heuristic" in reason
    assert stop_reason(NO_KNEE[:7], (), min_throughput_gain=0.10) is None  # one low gain (+8.5%) is not enough


def test_stop_on_a_bad_slo_breach_only() -> None:
    level = [closed_level(8, np.full(100, 45.0))]
    slo = (SloTarget(metric=Metric.TPOT, percentile=95, limit=30.0),)
    assert stop_reason(level, slo) is None  # 1.5x over: keep going
    reason = stop_reason([closed_level(8, np.full(100, 61.0))], slo)
    assert reason is not None and "tpot_p95_ms" in reason and "2x" in reason
    assert stop_reason([closed_level(8, np.full(100, 61.0))], slo, slo_breach_factor=None) is None


@pytest.mark.parametrize(
    ("n", "percentile", "trusted"),
    [(58, 95, False), (59, 95, True), (298, 99, False), (299, 99, True), (2000, 99.9, False)],
)
def test_too_few_samples_for_a_percentile_asked_is_untrusted(n: int, percentile: float, trusted: bool) -> None:
    level = closed_level(4, law_tpots(25, 0.4, 4, n, cv=0.01, seed=1))
    verdict = judge([level], [Quantity(Metric.TPOT, percentile)]).levels[0]
    assert verdict.trusted is trusted
    if not trusted:
        assert f"cannot bound a p{percentile:g}" in verdict.problems[0]


def test_a_window_shorter_than_three_request_lifetimes_is_untrusted() -> None:
    # E2E = 32 tokens x 26.6 ms = 0.85 s: a 2 s window holds fewer than three lifetimes
    level = closed_level(4, law_tpots(25, 0.4, 4, 100, cv=0.01, seed=1), window_s=2.0)
    problems = judge([level]).levels[0].problems
    assert any("shorter than 3 request lifetimes" in p for p in problems)
    assert judge([closed_level(4, law_tpots(25, 0.4, 4, 100, cv=0.01, seed=1), window_s=10.0)]).levels[0].trusted


def rising(level: LevelResult, rise_s: float) -> LevelResult:
    """The level with TTFT rising ``rise_s`` across its window, 200 requests due evenly, little noise."""
    trend = Trend()
    for i in range(200):
        x = level.window_s * i / 199
        trend.add(x, 0.5 + rise_s * x / level.window_s + 0.01 * (-1) ** i)
    return replace(level, ttft_trend=trend.as_tuple(), offered=level.completed)


def test_a_rising_ttft_is_overload_only_in_an_open_loop() -> None:
    # A closed loop's queue is bounded by its clients: a rise there is the server slowing (or an
    # unsettled start), never "the load exceeds capacity", and it has no offered load to compare.
    closed = rising(closed_level(16, np.full(100, 30.0)), rise_s=2.0)
    problems = judge([closed]).levels[0].problems
    assert any("not steady: TTFT rose 2.00 s" in p and "bounded by its 16 clients" in p for p in problems), problems
    assert not any("capacity" in p or "offered" in p for p in problems)
    opened = replace(closed, load=Load(kind="rate", value=20.0))
    problems = judge([opened]).levels[0].problems
    assert any("not steady (queue growing)" in p and "exceeds capacity" in p for p in problems), problems
    # a client starved of its core: the rise is no evidence of the server; the level says what it measured
    starved = replace(closed, bound_workers=("worker 1: its core taken by another process",))
    problems = judge([starved]).levels[0].problems
    assert any("client-bound" in p for p in problems) and not any("steady" in p for p in problems), problems


@pytest.mark.parametrize(("outage_s", "trusted"), [(None, True), (0.5, True), (3.0, False)])
def test_a_level_whose_server_refused_connections_for_a_while_is_untrusted_on_the_service_side(
    outage_s: float | None, trusted: bool
) -> None:
    """Issue 57 R3: killed 5 s into a level and restarted, the back-off spaced the connect failures under the
    20% rule and the level read as trusted with 90% fewer completions than its neighbours."""
    level = replace(closed_level(4, law_tpots(25, 0.4, 4, 200, cv=0.01, seed=1), window_s=10.0), outage_s=outage_s)
    verdict = judge([level]).levels[0]
    assert verdict.trusted is trusted, verdict.problems
    if not trusted:
        assert "the server stopped answering for 3.0 s of the level" in verdict.problems[0]
    gone = judge([replace(level, outage_s=5.2, target_gone=True, complete=False)])
    assert not gone.levels[0].trusted and "the level and the sweep stopped" in gone.levels[0].problems[0]
    assert gone.levels[0].service and "interrupted" not in " ".join(gone.levels[0].problems)


@pytest.mark.parametrize(("warmup", "spent"), [("5", True), ("0", False)])
def test_a_request_budget_spent_in_the_warm_up_is_said_so(tmp_path: Path, warmup: str, spent: bool) -> None:
    """``--requests 6`` beside the profile's 5 s warm-up measured nothing and said "lengthen the duration" of
    a run that had none; it says where the requests went, and only where they went there."""
    args = ["run", "--url", "sim", "--virtual-time", "--concurrency", "2", "--requests", "6", "--max-tokens", "4"]
    args += ["--warmup", warmup]
    result = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "r.json")])
    said = "every request was spent in the warm-up" in result.stderr
    assert said is spent and ("lengthen the duration" not in result.stderr), result.stderr
