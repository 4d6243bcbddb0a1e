"""A dataset's length distribution as the step model and the sizing simulation see it (pure, virtual time)."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.engine import EngineConfig
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner import Mix
from planner.capacity.sizing import Traffic, simulate_replicas
from planner.laws.lengthmodel import shaped_context
from planner.laws.lengthsample import LengthSample, shape_of

LAW = EngineConfig(base_ms=20.0, per_seq_ms=0.3, per_kv_ms=0.8, prefill_ms_per_token=0.02, max_num_seqs=16)


def test_context_is_weighted_by_the_steps_each_request_holds_it() -> None:
    # (P=100, O=10) holds 100..109 for 10 steps; (P=0, O=30) holds 0..29 for 30 steps:
    # (10*100 + 45 + 435) / 40 = 37.0 KV tokens per sequence-step, where the means' formula says 59.5
    sample = LengthSample(np.array([100.0, 0.0]), np.array([10, 30]), "two requests")
    mix = sample.mix
    assert (mix.prompt_tokens, mix.output_tokens) == (50.0, 20.0)
    assert mix.context_tokens == pytest.approx(37.0)
    assert Mix(50.0, 20.0).context_tokens == pytest.approx(59.5)


def test_one_length_for_every_request_is_the_fixed_mix() -> None:
    sample = LengthSample(np.full(5, 512.0), np.full(5, 64), "fixed")
    assert sample.mix.context_tokens == pytest.approx(Mix(512, 64).context_tokens)
    slos = (SloTarget(metric=Metric.TTFT, percentile=95, limit=400.0),)
    fixed = simulate_replicas(
        LAW, 2, 10.0, slos, Traffic(output_tokens=64, prompt_tokens=512, seed=3), size=(200, 1000)
    )
    drawn = simulate_replicas(
        LAW, 2, 10.0, slos, Traffic(output_tokens=64, prompt_tokens=512, lengths=sample, seed=3), size=(200, 1000)
    )
    assert drawn.utilization == pytest.approx(fixed.utilization)
    assert [e.value_ms for e in drawn.estimates] == pytest.approx([e.value_ms for e in fixed.estimates])


def test_a_long_tail_of_prompts_lengthens_ttft_p95_beyond_its_means() -> None:
    # the same means (prompt 512, output 64), one request in eight with a 3,584-token prompt: the TTFT
    # p95 of the sample is the long prompts' prefill, which a plan on means never sees
    prompts = np.array([3584.0] + [73.14] * 7)
    sample = LengthSample(prompts, np.full(8, 64), "tail")
    assert sample.mix.prompt_tokens == pytest.approx(512, rel=1e-3)
    slos = (SloTarget(metric=Metric.TTFT, percentile=95, limit=10_000.0),)
    means = simulate_replicas(LAW, 1, 5.0, slos, Traffic(output_tokens=64, prompt_tokens=512, seed=1), size=(200, 2000))
    tail = simulate_replicas(
        LAW, 1, 5.0, slos, Traffic(output_tokens=64, prompt_tokens=512, lengths=sample, seed=1), size=(200, 2000)
    )
    assert tail.estimates[0].value_ms > 1.5 * means.estimates[0].value_ms


def test_a_runs_shape_is_drawn_at_another_mixs_means() -> None:
    # outputs asked uniform within 25% of 64, prompts fixed: at a mix of 1,024 / 300 the prompts stay fixed
    # and the outputs spread within 25% of 300, their mean 300
    sample = LengthSample.shaped(
        Mix(1024, 300), {"mean": 64, "dist": "fixed", "spread": 0.0}, {"mean": 64, "dist": "uniform", "spread": 0.25}
    )
    assert set(sample.prompt_tokens) == {1024.0}
    assert sample.output_tokens.min() >= 225 and sample.output_tokens.max() <= 375
    assert sample.output_tokens.mean() == pytest.approx(300, rel=0.01)
    assert np.std(sample.output_tokens) == pytest.approx(300 * 0.25 / np.sqrt(3), rel=0.05)  # uniform's
    assert sample.source == "the calibration's shape at these means (prompt fixed, output uniform spread 0.25)"


def test_lengths_that_do_not_vary_are_one_fixed_request() -> None:
    sample = LengthSample.shaped(Mix(100.4, 16), None, {"mean": 16, "dist": "normal", "spread": 0.0})
    assert list(sample.prompt_tokens) == [100.0] and list(sample.output_tokens) == [16]
    assert sample.source == "fixed, prompt 100 / output 16"
    assert shape_of({"mean": 5, "dist": "lognormal", "spread": 0.5}) == ("lognormal", 0.5)
    assert shape_of({"mean": 5, "dist": "uniform", "spread": 0}) == shape_of(None) == ("fixed", 0.0)


@pytest.mark.parametrize(
    "output",
    [
        {"mean": 64, "dist": "uniform", "spread": 0.25},
        {"mean": 64, "dist": "uniform", "spread": 0.9},
        {"mean": 64, "dist": "normal", "spread": 0.3},
        {"mean": 64, "dist": "lognormal", "spread": 0.6},
    ],
)
def test_a_calibrations_context_per_sequence_step_is_that_of_the_answers_it_asked_for(
    output: dict[str, object],
) -> None:
    """A long answer holds its growing context for more steps: the mean a step sees is the drawn sample's
    sum(O P + O (O - 1) / 2) / sum(O), which the calibration's realised means and its asked shape give
    without drawing (``shaped_context``). Fixed answers: the means' formula (None)."""
    drawn = LengthSample.shaped(Mix(256, 64), None, output)
    assert drawn.varies
    context = shaped_context(256, 64, output)
    assert context is not None and context == pytest.approx(drawn.mix.context, rel=0.01)
    assert context > Mix(256, 64).context_tokens  # the means' formula reads short
    assert shaped_context(256, 64, {"mean": 64, "dist": "fixed", "spread": 0.0}) is None
    assert shaped_context(256, 64, None) is None and not LengthSample.fixed(256, 64).varies
