"""Baseline comparison: a tail one run cannot bound is shown but never a regression."""

from __future__ import annotations

import numpy as np

from loadgen.results import Metric
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
