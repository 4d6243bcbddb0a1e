"""One spelling of "metric + statistic" for profiles, --slo, the gate and compare."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.quantity import Aggregate, Metric, Quantity, samples_needed
from loadgen.slo_target import SloTarget
from planner.capacity.batch_limit import parse_slo
from planner.ci.gate import check_from_slo, evaluate_gate, parse_check
from tests.planner.synthetic import closed_level, sweep_results

percentiles = st.one_of(
    st.sampled_from([5.0, 50.0, 90.0, 95.0, 99.0, 99.9, 99.99]),
    st.decimals(min_value="0.1", max_value="99.9", places=1).map(float),
)
quantities = st.one_of(
    st.builds(lambda m, p: Quantity(m, percentile=p), st.sampled_from(list(Metric)), percentiles),
    st.builds(lambda m, a: Quantity(m, aggregate=a), st.sampled_from(list(Metric)), st.sampled_from(list(Aggregate))),
)


@given(quantities)
def test_parse_reads_back_every_key(q: Quantity) -> None:
    assert Quantity.parse(q.key) == q


@pytest.mark.parametrize(
    ("name", "percentile"),
    [
        ("tpot_p95", 95.0),
        ("ttft_p99.9", 99.9),
        ("itl_p999", 99.9),
        ("e2e_p5", 5.0),
        ("ttft_sent_p50", 50.0),
        ("tpot_p995", 99.5),
    ],
)
def test_percentiles_mean_the_same_everywhere(name: str, percentile: float) -> None:
    q = Quantity.parse(name)
    assert q.percentile == percentile
    slo_key = SloTarget.from_key(f"{name}_ms", 10.0)
    assert slo_key.percentile == percentile
    if q.metric in (Metric.TTFT, Metric.TTFT_SENT, Metric.TPOT, Metric.ITL, Metric.E2E):
        assert parse_slo(f"{name}<10ms").percentile == percentile
    assert Quantity.parse(parse_check(f"{name} < 10ms").quantity).percentile == percentile


@pytest.mark.parametrize("name", ["tpot_p100", "tpot_p0", "tpot", "speed_p95", "tpot_p95x", "tpot_median"])
def test_bad_names_are_refused_with_what_was_expected(name: str) -> None:
    with pytest.raises(ValueError, match=r"expected|between 0 and 100"):
        Quantity.parse(name)


def test_samples_needed() -> None:
    assert (samples_needed(95), samples_needed(99), samples_needed(99.9)) == (59, 299, 2995)


def test_a_p999_slo_from_a_profile_checks_the_999th_percentile_not_the_maximum() -> None:
    # 3,000 TPOTs of 20 ms and 2 slow ones of 500 ms: the max breaches 100 ms, the p99.9 does not
    import numpy as np

    tpots = np.concatenate([np.full(3000, 20.0), np.full(2, 500.0)])
    results = sweep_results((closed_level(4, tpots, window_s=120.0),))
    slo = SloTarget.from_key("tpot_p999_ms", 100.0)
    assert slo.key == "tpot_p99.9_ms"
    verdict = evaluate_gate(results, [check_from_slo(slo)])
    assert verdict.exit_code == 0, verdict
    assert verdict.checks[0].value == pytest.approx(20.0, rel=0.01)
    assert evaluate_gate(results, [parse_check("tpot_max < 100ms")]).exit_code == 1
