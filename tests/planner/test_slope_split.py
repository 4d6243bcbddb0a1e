"""The decode slope at a mix the calibrated slopes do not determine: its range over every non-negative split
(planner.laws.slope_split), which holds an engine whose prefill in a step of decodes costs other than alone."""

from __future__ import annotations

import numpy as np
import pytest

from planner import Mix, fit_length_model
from planner.laws.lengthmodel import CalibrationPoint, LengthModel, slope_features, tpot_features, ttft_idle_features
from planner.laws.slope_split import slope_range

LAW = {"base_ms": 18.0, "per_seq_ms": 0.05, "per_kv_ms": 0.03, "prefill_ms_per_token": 0.02,
       "prefill_attention_ms": 0.0, "overhead_ms": 5.0}  # fmt: skip
TWO = [Mix(200, 200), Mix(5000, 500)]  # NIM's published 70B mixes
ASKED = Mix(1000, 1000)  # off their line: another output length


def _rows(mixes: list[Mix], idle_prefill: float = LAW["prefill_ms_per_token"]) -> list[CalibrationPoint]:
    """TPOT at four batches and TTFT at concurrency 1 per mix; ``idle_prefill``: what a prompt token costs an
    idle engine, where it may differ from what a chunk carried among decodes costs (a GPU's lone prefill)."""
    step = np.array(list(LAW.values()))
    idle = step.copy()
    idle[3] = idle_prefill
    rows = []
    for mix in mixes:
        group = f"P{mix.prompt_tokens:g}/O{mix.output_tokens:g}"
        for b in (1, 5, 25, 50):
            rows.append(
                CalibrationPoint(
                    group=group,
                    label=f"{group} c={b}",
                    kind="tpot",
                    batch=b,
                    mix=mix,
                    value_ms=float(tpot_features(b, mix) @ step),
                )
            )
        ttft = float(ttft_idle_features(mix, None) @ idle)
        rows.append(
            CalibrationPoint(group=group, label=f"{group} TTFT", kind="ttft_idle", batch=1, mix=mix, value_ms=ttft)
        )
    return rows


def _slope(model: LengthModel, mix: Mix) -> float:
    law = model.at_mix(mix)
    assert law is not None
    return law.per_seq_ms


def _true_slope(mix: Mix) -> float:
    return float(slope_features(mix) @ np.array(list(LAW.values())))


def test_a_mix_on_the_calibrated_mixes_line_is_determined_whatever_the_split() -> None:
    model = fit_length_model(_rows([Mix(200, 200), Mix(2000, 200)]))
    assert slope_range(model, Mix(4000, 200)) is None  # a longer prompt, the same output: every term grows alike
    assert _slope(model, Mix(4000, 200)) == pytest.approx(_true_slope(Mix(4000, 200)), rel=1e-6)


def test_off_the_line_the_range_runs_between_the_splits_the_calibrated_slopes_allow() -> None:
    model = fit_length_model(_rows(TWO))
    split = slope_range(model, ASKED)
    assert split is not None
    low, high = split
    # two mixes, three terms: the vertices put the slopes' difference all on KV (the high end: a step carries
    # no prefill) or all on prefill (the low end: no KV); per sequence and KV alone cannot be negative
    (s1, c1, q1), (s2, c2, q2) = [(_slope(model, m), m.context_tokens / 1000, m.prompt_tokens / m.output_tokens)
                                  for m in TWO]  # fmt: skip
    assert high == pytest.approx(s1 + (s2 - s1) / (c2 - c1) * (ASKED.context_tokens / 1000 - c1), rel=1e-6)
    assert low == pytest.approx(s1 + (s2 - s1) / (q2 - q1) * (1.0 - q1), rel=1e-6)
    fitted = _slope(model, ASKED)
    assert fitted == pytest.approx(_true_slope(ASKED), rel=1e-6) and low <= fitted <= high


def test_an_idle_prefill_dearer_than_a_steps_reads_the_slope_low_and_the_range_holds_the_truth() -> None:
    model = fit_length_model(_rows(TWO, idle_prefill=0.08))  # four times a step's: the fit's split is wrong
    truth = _true_slope(ASKED)
    assert _slope(model, ASKED) < 0.9 * truth  # the optimistic end, as NIM's table read it
    split = slope_range(model, ASKED)
    assert split is not None and split[0] <= truth <= split[1]


def test_three_mixes_whose_terms_span_the_slope_determine_it() -> None:
    # a third output length at a prompt calibrated already (a third prompt length would fit attention too)
    model = fit_length_model(_rows([*TWO, Mix(200, 2000)]))
    assert slope_range(model, ASKED) is None
    assert _slope(model, ASKED) == pytest.approx(_true_slope(ASKED), rel=1e-6)
