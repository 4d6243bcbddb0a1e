"""Baseline comparison: a tail one run cannot bound is shown but never a regression."""

from __future__ import annotations

import numpy as np

from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from planner.ci.compare import Delta, compare_level
from tests.planner.synthetic import closed_level


def _with_stalls(n: int, share: float, seed: int) -> np.ndarray:
    """TPOTs of 50 ms, a ``share`` of them stalled to 80 ms (a machine that lost the CPU now and then)."""
    rng = np.random.default_rng(seed)
    tpot = 50.0 * rng.lognormal(0.0, 0.02, n)
    tpot[rng.random(n) < share] = 80.0
    return tpot


def _delta(deltas: list[Delta], quantity: str) -> Delta:
    return next(d for d in deltas if d.quantity == quantity)


def test_an_itl_p99_from_too_few_engine_steps_is_not_a_regression() -> None:
    # 6,400 pooled gaps at batch 64 are 100 engine steps: a p99 needs 299, so it is the maximum.
    base = closed_level(64, _with_stalls(6400, 0.0, seed=1))
    cand = closed_level(64, _with_stalls(6400, 0.03, seed=2))
    assert base.independent_samples(Metric.ITL) == 100
    itl = _delta(compare_level(base, cand, max_regression=0.10), "itl_p99")
    assert itl.worse and itl.change is not None and itl.change > 0.3
    assert not itl.resolvable and not itl.significant and not itl.regression


def test_the_same_tail_shift_over_enough_steps_is_a_regression() -> None:
    base = closed_level(4, _with_stalls(6400, 0.0, seed=1))  # 1,600 steps
    cand = closed_level(4, _with_stalls(6400, 0.03, seed=2))
    itl = _delta(compare_level(base, cand, max_regression=0.10), "itl_p99")
    assert itl.resolvable and itl.significant and itl.regression


def test_a_per_request_percentile_counts_requests() -> None:
    base = closed_level(64, _with_stalls(6400, 0.0, seed=1))
    cand = closed_level(64, _with_stalls(6400, 0.08, seed=2))
    assert base.independent_samples(Metric.TPOT) == 6400
    tpot = _delta(compare_level(base, cand, max_regression=0.10), "tpot_p95")
    assert tpot.resolvable and tpot.regression


def _run(tpot_ms: float, seed: int) -> LevelResult:
    """A level of 6,400 requests at batch 4 whose TPOTs sit around ``tpot_ms`` (1% spread within the run)."""
    return closed_level(4, tpot_ms * np.random.default_rng(seed).lognormal(0.0, 0.01, 6400))


def test_baselines_that_spread_between_runs_call_a_change_inside_that_spread_noise() -> None:
    # three runs of one build read TPOT p50 50, 55 and 60 ms: the machine moves a run by ~10%, which no
    # single run's own interval (1% spread, 6,400 requests) can show
    bases = [_run(50.0, 1), _run(55.0, 2), _run(60.0, 3)]
    cand = _run(60.0, 4)
    alone = _delta(compare_level(bases[0], cand, max_regression=0.05), "tpot_p50")
    assert alone.regression and alone.detectable is not None and alone.detectable < 0.02
    pooled = _delta(compare_level(bases, cand, max_regression=0.05), "tpot_p50")
    assert pooled.baseline is not None and abs(pooled.baseline - 55.0) < 0.5  # the runs' mean
    assert pooled.baseline_runs == 3
    assert pooled.worse and not pooled.significant and not pooled.regression
    # one run's spread (sd 5 ms of 55) at 95%, for the candidate's one run and the mean of three
    assert pooled.detectable is not None and pooled.detectable > 0.2


def test_baselines_that_agree_make_a_10_percent_change_a_regression_with_a_narrower_band() -> None:
    bases = [_run(50.0, seed) for seed in (1, 2, 3)]
    cand = _run(55.0, 4)
    alone = _delta(compare_level(bases[0], cand, max_regression=0.05), "tpot_p50")
    pooled = _delta(compare_level(bases, cand, max_regression=0.05), "tpot_p50")
    assert pooled.regression and alone.regression
    assert pooled.detectable is not None and alone.detectable is not None
    assert pooled.detectable < alone.detectable  # the mean of three runs is known better than one run


def test_one_baseline_in_a_list_is_the_baseline_alone() -> None:
    base, cand = _run(50.0, 1), _run(53.0, 2)
    assert compare_level([base], cand, max_regression=0.05) == compare_level(base, cand, max_regression=0.05)


def test_a_closed_loops_throughput_is_as_noisy_as_its_request_times_not_as_a_poisson_count() -> None:
    # c=32 for 6 s of 0.6 s requests: ~320 requests. Counted as Poisson arrivals, tok/s could not tell
    # apart less than ±45%; a closed loop's rate is its concurrency over its E2E mean (Little's law), known
    # as well as that mean: a server 10% slower is a throughput regression
    base = closed_level(32, 37.8 * np.random.default_rng(1).lognormal(0.0, 0.03, 320), output_tokens=16, window_s=6)
    cand = closed_level(32, 41.6 * np.random.default_rng(2).lognormal(0.0, 0.03, 290), output_tokens=16, window_s=6)
    tput = _delta(compare_level(base, cand, max_regression=0.05), "output_tokens_per_s")
    assert tput.change is not None and -0.12 < tput.change < -0.08
    assert tput.detectable is not None and tput.detectable < 0.03
    assert tput.regression
