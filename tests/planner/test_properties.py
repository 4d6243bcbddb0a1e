"""hypothesis properties of the fit, the SLO inversion and the sizing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import StepModel, fit_step_model, isotonic_increasing, replicas_for

bases = st.floats(1.0, 100.0)
slopes = st.floats(0.01, 5.0)
levels = st.lists(st.integers(1, 512), min_size=3, max_size=10, unique=True)


@given(bases, slopes, levels)
def test_noiseless_data_is_recovered_exactly(base: float, slope: float, xs: list[int]) -> None:
    x = np.array(xs, dtype=float)
    m = fit_step_model(x, base + slope * x, bootstrap=0)
    assert np.allclose([m.base_ms, m.per_seq_ms], [base, slope], rtol=1e-9, atol=1e-9)


@given(bases, slopes, levels, st.randoms(use_true_random=False))
def test_fit_is_invariant_to_the_order_of_levels(base: float, slope: float, xs: list[int], rnd) -> None:  # type: ignore[no-untyped-def]
    x = np.array(xs, dtype=float)
    y = base + slope * x + np.sin(x)  # some structure, not noise-free
    perm = list(range(len(x)))
    rnd.shuffle(perm)
    a, b = fit_step_model(x, y, bootstrap=0), fit_step_model(x[perm], y[perm], bootstrap=0)
    assert (a.base_ms, a.per_seq_ms) == pytest.approx((b.base_ms, b.per_seq_ms))


@settings(max_examples=40)
@given(bases, slopes, st.integers(0, 6))
def test_one_corrupted_level_moves_per_seq_by_under_5_percent(base: float, slope: float, bad: int) -> None:
    x = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)
    y = base + slope * x
    y[bad] *= 3.0
    m = fit_step_model(x, y, bootstrap=0)
    assert m.per_seq_ms == pytest.approx(slope, rel=0.05)


@given(bases, slopes, st.floats(1.0, 2000.0), st.floats(0.0, 500.0))
def test_max_batch_is_the_exact_boundary_and_monotone(base: float, slope: float, slo: float, more: float) -> None:
    law = StepModel.given(base, slope)
    b = law.max_batch(slo)
    if b is None:
        assert base + slope > slo * (1 + 1e-12)
        return
    assert law.step_ms(b) <= slo * (1 + 1e-12) and law.step_ms(b + 1) > slo * (1 - 1e-12)
    b2 = law.max_batch(slo + more)
    assert b2 is not None and b2 >= b


@given(st.floats(0.1, 1000), st.floats(1, 4000), st.floats(10, 1e5), st.floats(0.0, 500))
def test_replicas_are_minimal_and_monotone_in_qps(qps: float, out_tokens: float, cap: float, extra: float) -> None:
    plan = replicas_for(qps, out_tokens, cap, max_utilization=1.0)
    need = qps * out_tokens
    r = plan.replicas_no_headroom
    assert r * cap >= need * (1 - 1e-12)
    assert r == 1 or (r - 1) * cap < need * (1 + 1e-12)
    assert replicas_for(qps + extra, out_tokens, cap).replicas_no_headroom >= r


@given(st.lists(st.floats(-100, 100), min_size=1, max_size=30))
def test_isotonic_is_monotone_and_keeps_the_sum(y: list[float]) -> None:
    fit = isotonic_increasing(np.array(y))
    assert np.all(np.diff(fit) >= -1e-9)
    assert fit.sum() == pytest.approx(sum(y), abs=1e-6)


def test_inputs_are_not_mutated_and_read_only_arrays_work() -> None:
    x = np.array([1.0, 2.0, 4.0])
    y = np.array([25.4, 25.8, 26.6])
    x.setflags(write=False)
    y.setflags(write=False)
    fit_step_model(x, y)
    assert x.tolist() == [1.0, 2.0, 4.0]


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        ([1, 2], [1.0], "equal length"),
        ([1], [1.0], "at least 2"),
        ([1, 2], [1.0, np.inf], "infs or NaNs"),
        ([3, 3], [1.0, 2.0], "must not all be equal"),
    ],
)
def test_bad_inputs_raise_clear_errors(x: list[float], y: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit_step_model(x, y)


def test_law_given_has_no_fit_statistics() -> None:
    law = StepModel.given(25, 0.4)
    assert law.r_squared is None and law.n_levels == 0
