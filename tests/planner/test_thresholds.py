"""One threshold grammar: ``--slo`` and ``gate --require`` read the same text the same way."""

from __future__ import annotations

import pytest

from loadgen.slo_target import SloTarget
from planner.capacity.batch_limit import parse_slo
from planner.ci.gate import check_from_slo, parse_check
from planner.evidence.thresholds import ThresholdSyntaxError, UnknownQuantity, parse_threshold


@pytest.mark.parametrize(
    ("text", "quantity", "value"),
    [
        ("tpot_p95<50ms", "tpot_p95", 50.0),
        ("ttft_p99.9 <= 2s", "ttft_p99.9", 2000.0),
        ("tpot_mean<40ms", "tpot_mean", 40.0),
        ("itl_p999<100", "itl_p99.9", 100.0),
        ("error_rate<1%", "error_rate", 0.01),
    ],
)
def test_an_slo_and_a_gate_check_read_one_text_alike(text: str, quantity: str, value: float) -> None:
    slo, check = parse_slo(text), parse_check(text)
    assert check.quantity == quantity and check.threshold == pytest.approx(value)
    assert slo.limit == pytest.approx(value)
    from_slo = check_from_slo(slo)
    assert (from_slo.quantity, from_slo.threshold) == (check.quantity, check.threshold)


def test_a_profile_key_names_the_same_quantity() -> None:
    assert SloTarget.from_key("ttft_p99.9_ms", 2000.0) == parse_slo("ttft_p99.9<2s")


@pytest.mark.parametrize(
    "text",
    ["tpot_p95>50ms", "tpot_p95<50ms @c=8", "goodput_ratio<0.5", "output_tokens_per_s<10", "tpot_max<5ms", "tpot<5"],
)
def test_what_a_gate_may_check_but_no_plan_can_promise_is_refused_by_slo(text: str) -> None:
    with pytest.raises(ValueError, match=r"--slo .*expected METRIC_pNN"):
        parse_slo(text)


def test_the_grammar_names_the_unit_a_quantity_takes() -> None:
    with pytest.raises(ValueError, match="a latency takes ms or s"):
        parse_threshold("tpot_p95<5%", "--require")
    with pytest.raises(ValueError, match="error_rate is a fraction between 0 and 1"):
        parse_threshold("error_rate<150%", "--slo")
    with pytest.raises(ValueError, match="takes a plain number"):
        parse_threshold("requests_per_s>5ms", "--require")
    with pytest.raises(UnknownQuantity):
        parse_threshold("latency_p95<5ms", "--require")
    with pytest.raises(ThresholdSyntaxError):
        parse_threshold("tpot_p95 is small", "--require")
