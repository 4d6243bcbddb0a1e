"""The step model with lengths: exact recovery on its own rows, what it cannot separate, and the
simulator's laws recovered from virtual-time sweeps at two prompt lengths (docs/design.md, issue 25)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from loadgen.engine import EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.level.server_sample import ServerSample
from loadgen.quantity import Metric
from loadgen.results import Results
from loadgen.sim.openai_app import SimOptions
from loadgen.slo_target import SloTarget
from planner import Mix, PlanRequest, StepModel, fit_length_model, plan_for_mix
from planner.capacity.mix_forecast import (
    forecast_mix,
    idle_ttft_bound,
    mix_batch_limit,
    prefix_cache_note,
    recommended_budget,
)
from planner.capacity.plan_mix import _at_least_the_rate_one_replica_holds
from planner.capacity.predicted import calibration_residual
from planner.laws.lengthmodel import (
    COEFFICIENTS,
    TERMS,
    CalibrationPoint,
    tpot_features,
    ttft_idle_features,
)
from planner.laws.nonnegative import nonnegative_lstsq
from tests.virtual import run_virtual

TRUE = {"base_ms": 20.0, "per_seq_ms": 0.3, "per_kv_ms": 0.8, "prefill_ms_per_token": 0.02,
        "prefill_attention_ms": 0.0, "overhead_ms": 1.5}  # fmt: skip


def _rows(
    mixes: list[Mix], *, idle: bool, budget: int | None = None, truth: dict[str, float] = TRUE
) -> list[CalibrationPoint]:
    beta = np.array(list(truth.values()))
    rows = []
    for mix in mixes:
        group = f"P{mix.prompt_tokens:g}/O{mix.output_tokens:g}"
        for b in (1, 4, 8, 16, 32):
            rows.append(
                CalibrationPoint(
                    group=group,
                    label=f"{group} c={b}",
                    kind="tpot",
                    batch=b,
                    mix=mix,
                    value_ms=float(tpot_features(b, mix) @ beta),
                )
            )
        if idle:
            value = float(ttft_idle_features(mix, budget) @ beta)
            rows.append(
                CalibrationPoint(group=group, label=f"{group} TTFT", kind="ttft_idle", batch=1, mix=mix, value_ms=value)
            )
    return rows


@pytest.mark.parametrize("budget", [None, 100])
def test_two_prompt_lengths_and_ttft_at_concurrency_1_separate_every_term(budget: int | None) -> None:
    model = fit_length_model(_rows([Mix(64, 64), Mix(256, 64)], idle=True, budget=budget), budget=budget)
    for c in model.coefficients:
        if c.name == "prefill_attention_ms":  # two prompt lengths: prefill is taken as linear, and it says so
            assert c.value is None and "needs a third prompt length" in c.note
        else:
            assert c.value == pytest.approx(TRUE[c.name], rel=1e-6)
    assert model.not_separated == () and model.separation_note() == ""
    law = model.at_mix(Mix(1024, 128))
    assert law is not None
    assert law.per_seq_ms == pytest.approx(0.3 + 0.8 * (1024 + 63.5) / 1000 + 0.02 * 1024 / 128)
    assert law.base_ms == pytest.approx(20.0 - 0.02 * 1024 / 128)


def test_one_sweep_predicts_only_its_own_mix() -> None:
    model = fit_length_model(_rows([Mix(128, 64)], idle=True))
    assert model.at_mix(Mix(512, 64)) is None  # never guessed
    assert set(model.not_separated) >= {"per_kv_ms", "prefill_ms_per_token"}
    assert "second prompt length" in model.separation_note()
    same = model.at_mix(Mix(128, 64))
    assert same is not None and same.per_seq_ms == pytest.approx(0.3 + 0.8 * (128 + 31.5) / 1000 + 0.02 * 2)


def test_one_bad_level_does_not_drag_the_fit() -> None:
    rows = _rows([Mix(64, 64), Mix(256, 64), Mix(64, 32)], idle=True)  # two prompt lengths: a linear prefill
    bad = rows[3]
    rows[3] = CalibrationPoint(
        group=bad.group, label=bad.label, kind=bad.kind, batch=bad.batch, mix=bad.mix, value_ms=bad.value_ms * 1.4
    )
    model = fit_length_model(rows)
    assert bad.label in model.outliers
    for name in COEFFICIENTS:
        if name != "prefill_attention_ms":
            assert model.coefficient(name).value == pytest.approx(TRUE[name], rel=0.03)


def _swept_again(rows: list[CalibrationPoint], name: str, factor: float) -> list[CalibrationPoint]:
    """The same sweeps run again as ``name``, the engine ``factor`` times slower on the second prompt length."""
    longest = max(p.mix.prompt_tokens for p in rows)
    out = []
    for p in rows:
        value = p.value_ms * (factor if p.mix.prompt_tokens == longest else 1.0)
        out.append(
            CalibrationPoint(
                group=f"{name} {p.group}",
                label=f"{name} {p.label}",
                kind=p.kind,
                batch=p.batch,
                mix=p.mix,
                value_ms=value,
            )
        )
    return out


def test_sweeps_repeated_minutes_apart_put_the_engines_drift_into_the_intervals() -> None:
    # vLLM's CPU build, two calibrations at 64 and 256 minutes apart: prefill 0.048 then 0.022 ms/token, each
    # with a within-sweep interval a tenth of that gap. Here the second pair's 256 sweep ran 1.3x slower.
    rows = _rows([Mix(64, 64), Mix(256, 64)], idle=True)
    first, second = _swept_again(rows, "a", 1.0), _swept_again(rows, "b", 1.3)
    alone = [fit_length_model(pair).coefficient("prefill_ms_per_token") for pair in (first, second)]
    low, high = (c.value for c in alone)
    assert low is not None and high is not None and high > 2 * low
    for c, other in zip(alone, (high, low)):  # each alone is sure of itself, and wrong about the other
        assert c.ci is not None and not c.ci[0] <= other <= c.ci[1]
    assert "swept once" in fit_length_model(first).drift_note()
    both = fit_length_model(first + second)
    assert both.drift_note() == ""
    ci = both.coefficient("prefill_ms_per_token").ci
    assert ci is not None and ci[0] <= low and high <= ci[1]


@pytest.mark.parametrize("budget", [None, 100])
def test_three_prompt_lengths_fit_prefills_square_term_exactly(budget: int | None) -> None:
    truth = {**TRUE, "prefill_attention_ms": 12.0}  # ms per million token pairs: 6.3 ms at 1,024 tokens
    rows = _rows([Mix(64, 64), Mix(256, 64), Mix(512, 64)], idle=True, budget=budget, truth=truth)
    model = fit_length_model(rows, budget=budget)
    for c in model.coefficients:
        assert c.value == pytest.approx(truth[c.name], rel=1e-6), c.name
    at_1024 = model.predict(ttft_idle_features(Mix(1024, 64), budget))
    assert at_1024 is not None
    assert at_1024.value_ms == pytest.approx(float(ttft_idle_features(Mix(1024, 64), budget) @ list(truth.values())))


LAWS = [  # (law, budget): four the fit was not tuned on; the last chunks the 256-token prompts
    (dict(base_ms=12.0, per_seq_ms=0.5, per_kv_ms=1.5, prefill_ms_per_token=0.03), None),
    (dict(base_ms=30.0, per_seq_ms=0.15, per_kv_ms=0.4, prefill_ms_per_token=0.01), None),
    (dict(base_ms=8.0, per_seq_ms=0.9, per_kv_ms=3.0, prefill_ms_per_token=0.05), None),
    (dict(base_ms=18.0, per_seq_ms=0.25, per_kv_ms=1.0, prefill_ms_per_token=0.04), 96),
]


def _calibrate(law: dict[str, float], budget: int | None, prompt: int, levels: tuple[int, ...] = (1, 8, 32)) -> Results:
    sim = {**law, "max_num_seqs": 64, **({"max_num_batched_tokens": budget} if budget else {})}
    profile = parse_profile(
        {
            "schema_version": 1,
            "name": f"calib-{prompt}",
            "target": {"sim": sim},
            "api": "completions",
            "workload": {"prompt_tokens": prompt, "output_tokens": 64},
            "load": {"mode": "closed", "levels": list(levels), "duration_s": 8, "warmup_s": 2},
            "stop": {"slo_breach_factor": None},
            "seed": 3,
        },
        "test",
    )
    assert profile.sim is not None
    return run_virtual(profile, sim=SimOptions(engine=profile.sim))[0]


@pytest.mark.parametrize(("law", "budget"), LAWS)
def test_the_simulators_law_is_recovered_and_a_larger_mix_planned_within_one_batch(
    law: dict[str, float], budget: int | None
) -> None:
    calibrations = [(f"calib-{p}.json", _calibrate(law, budget, p)) for p in (64, 256)]
    slo = SloTarget(metric=Metric.TPOT, percentile=50, limit=60.0)
    mix = Mix(1024, 128)  # 4x the longest prompt, 2x the output of anything calibrated
    plan = plan_for_mix(calibrations, PlanRequest(slos=(slo,), prompt_tokens=1024, output_tokens=128, simulate=False))
    assert plan.mix is not None
    for name in law:
        assert plan.mix.model.coefficient(name).value == pytest.approx(law[name], rel=0.05), name
    truth = EngineConfig(**law)  # type: ignore[arg-type]  # every key a float field
    slope = truth.per_seq_ms + truth.per_kv_ms * mix.context_tokens / 1000 + truth.prefill_ms_per_token * 1024 / 128
    true_batch = math.floor((60.0 - (truth.base_ms - truth.prefill_ms_per_token * 1024 / 128)) / slope)
    (limit,) = plan.limits
    assert limit.model_batch is not None and abs(limit.model_batch - true_batch) <= 1  # the law's own answer
    # the batch acted on is the upper end of the slope's range: an output length not calibrated leaves the split
    # of the slopes into KV and prefill to the idle server's prefill, which a real engine's steps need not
    # cost (planner.laws.slope_split); never above the truth, and within 20% of it where the law is the model's
    assert plan.max_batch is not None and 0.8 * true_batch <= plan.max_batch <= true_batch
    assert any("any split allows" in w for w in plan.mix.warnings)
    assert plan.mix.extrapolation  # 1024 prompt tokens leave the calibrated 64..256, and it says so


def test_a_square_prefill_term_is_recovered_from_three_prompt_lengths_and_predicts_a_longer_prompt() -> None:
    """The simulator's prefill with attention's square term (20 ms per million token pairs: 10.5 ms for a
    1,024-token prompt): three sweeps at 64, 256 and 512 tokens recover every term within 5%, and TTFT at
    concurrency 1 for 1,024 tokens, run on the true law, is predicted within 5%; two sweeps say they took
    prefill as linear and warn that the longer prompt may prefill slower."""
    law = dict(base_ms=15.0, per_seq_ms=0.3, per_kv_ms=1.0, prefill_ms_per_token=0.02, prefill_attention_ms=20.0)
    calibrations = [(f"calib-{p}.json", _calibrate(law, None, p)) for p in (64, 256, 512)]
    request = PlanRequest(
        slos=(SloTarget(metric=Metric.TPOT, percentile=50, limit=60.0),),
        prompt_tokens=1024,
        output_tokens=64,
        simulate=False,
    )
    plan = plan_for_mix(calibrations, request)
    assert plan.mix is not None
    model = plan.mix.model
    for name, value in law.items():
        assert model.coefficient(name).value == pytest.approx(value, rel=0.05), name
    truth = _calibrate(law, None, 1024, levels=(1,)).levels[0]
    predicted = model.predict(ttft_idle_features(Mix(1024, 64), None))
    assert predicted is not None
    assert predicted.value_ms == pytest.approx(truth.percentile_ms(Metric.TTFT_SENT, 50), rel=0.05)
    two = plan_for_mix(calibrations[:2], request)
    assert two.mix is not None and two.mix.model.coefficient("prefill_attention_ms").note
    assert any("may prefill slower than predicted" in w for w in two.warnings)
    # the two lengths' line under-predicts the longer prompt; their growth taken as all attention bounds it above
    linear = two.mix.model.predict(ttft_idle_features(Mix(1024, 64), None))
    bound = idle_ttft_bound(two.mix.model, 1024)
    measured = truth.percentile_ms(Metric.TTFT_SENT, 50)
    assert linear is not None and bound is not None and measured is not None
    assert linear.value_ms < measured < bound
    assert any(f"TTFT at an idle server would read up to {bound:,.1f} ms" in w for w in two.warnings)


def test_the_recommended_budget_prices_the_chunk_where_attention_costs_most() -> None:
    law = StepModel.given(20.0, 0.5)  # batch 10: a 25 ms step, 15 ms of room under 40 ms
    linear = EngineConfig(base_ms=20.0, per_seq_ms=0.5, prefill_ms_per_token=0.01)
    assert recommended_budget(law, linear, 10, 40.0, 4096)[0] == 10 + 1500
    square = EngineConfig(base_ms=20.0, per_seq_ms=0.5, prefill_ms_per_token=0.01, prefill_attention_ms=10.0)
    budget, why = recommended_budget(law, square, 10, 40.0, 4096)
    assert budget is not None and "the prompt's last" in why
    c = budget - 10

    def cost(n: int) -> float:  # the last n tokens of a 4,096-token prompt attend 4096*n - n(n-1)/2 pairs
        return 0.01 * n + 10.0 * (4096 * n - n * (n - 1) / 2) / 1e6

    assert cost(c) <= 15.0 < cost(c + 1)


def test_against_its_own_simulator_the_fitted_engine_leaves_no_ttft_residual() -> None:
    """The residual is what a server holds beyond the fitted engine: a calibration of the simulator, whose
    engine the fit recovers, must leave about none, at every level and statistic (none invented)."""
    law, budget = LAWS[3]  # chunks the 256-token prompts: the residual's simulation must chunk them too
    calibrations = [(f"calib-{p}.json", _calibrate(law, budget, p, levels=(1, 4, 8))) for p in (64, 256)]
    forecast = forecast_mix(calibrations, Mix(1024, 128), ())
    assert forecast.engine is not None
    residual = calibration_residual(forecast.engine, calibrations, budget, None)
    assert residual is not None and [t.percentile for t in residual.terms] == [50.0, 95.0, None]
    for term in residual.terms:
        assert len(term.rows) == 6
        slope = 0.1 if term.percentile is not None else 0.15  # the mean also averages the tail's few late requests
        assert abs(term.at_one_ms) < 0.5 and abs(term.per_client_ms) < slope, term.text  # steps of 18-40 ms
        assert term.added_ms(8.0) < 1.0


def test_a_flat_calibration_is_bounded_per_token_and_a_length_swept_twice_is_one_length() -> None:
    """vLLM's CPU build once read TTFT 15.2 and 12.3 ms at 64 tokens and 16.9 and 12.3 at 256 (two sweeps of
    each, interleaved), then 38.2 at 1,024: short prompts ride a step's fixed cost. Read as one length each
    (63.9 and 64.2 tokens are one asked length), the growth taken as all attention says 29 ms; every token
    as dear as the whole TTFT at 256 says four times that TTFT, which holds the 38.2."""
    rows = []
    for prompt, ttft in ((63.9, 15.2), (64.2, 12.3), (253.0, 16.9), (255.6, 12.3)):
        mix = Mix(prompt, 64)
        group = f"P{prompt:g}"
        beta = np.array(list(TRUE.values()))
        rows += [
            CalibrationPoint(
                group=group,
                label=f"{group} c={b}",
                kind="tpot",
                batch=b,
                mix=mix,
                value_ms=float(tpot_features(b, mix) @ beta),
            )
            for b in (1, 4, 8)
        ]
        rows.append(
            CalibrationPoint(group=group, label=f"{group} TTFT", kind="ttft_idle", batch=1, mix=mix, value_ms=ttft)
        )
    bound = idle_ttft_bound(fit_length_model(rows), 1024)
    assert bound is not None
    assert bound == pytest.approx((16.9 + 12.3) / 2 * 1024 / ((253.0 + 255.6) / 2), rel=1e-9)
    assert 38.2 < bound < 70  # not 435,663 ms (the two 256-token sweeps once read as two lengths 2.6 apart)


def test_a_calibration_whose_tpot_falls_with_the_batch_bounds_no_batch_and_says_so() -> None:
    # a noisy calibration can fit a law that falls with the batch: every batch "meets" the SLO there, which
    # is no bound, and not the floor either (batch 1 meets it)
    falling = {**TRUE, "per_seq_ms": -0.6}  # at the mix: -0.6 + 0.8 x 0.23 (KV) + 0.02 x 3 (prefill) < 0
    model = fit_length_model(_rows([Mix(64, 64), Mix(256, 64)], idle=True, truth=falling))
    limit = mix_batch_limit(model, Mix(200, 64), SloTarget(metric=Metric.TPOT, percentile=95, limit=40.0))
    assert limit.batch is None and limit.quality == "insufficient range"
    assert "does not grow with the batch" in limit.note and "no batch meets it" not in limit.note


def test_no_term_of_the_step_is_fitted_below_zero() -> None:
    """No term of a step is negative: a calibration that a free fit would read as a KV term below zero (the
    256-token sweep's TPOT 30% faster, an engine that sped up between sweeps) fits that term at zero and
    refits the rest, rather than paying for it with another term above the truth."""
    mixes = [Mix(64, 64), Mix(256, 64)]
    rows = [
        replace(r, value_ms=r.value_ms * 0.7) if r.kind == "tpot" and r.mix.prompt_tokens == 256 else r
        for r in _rows(mixes, idle=True)
    ]
    free = np.linalg.lstsq(np.array([tpot_features(r.batch, r.mix) if r.kind == "tpot" else
                                     ttft_idle_features(r.mix, None) for r in rows]),
                           np.array([r.value_ms for r in rows]), rcond=None)[0]  # fmt: skip
    assert free[TERMS.index("per_kv_ms")] < 0  # the cause is there
    model = fit_length_model(rows)
    values = {c.name: c.value for c in model.coefficients if c.value is not None}
    assert values["per_kv_ms"] == 0.0 and all(v >= 0 for v in values.values())
    assert all(c.ci is None or c.ci[0] >= 0 for c in model.coefficients)


def test_nonnegative_least_squares_meets_its_optimality_conditions() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        a, b = rng.normal(size=(12, 5)), rng.normal(size=12)
        x = nonnegative_lstsq(a, b)
        gradient = a.T @ (b - a @ x)
        assert np.all(x >= 0) and np.all(gradient <= 1e-8)
        assert np.allclose(gradient[x > 0], 0.0, atol=1e-8)  # free where positive, pushing down where zero


def test_a_calibration_whose_prompts_the_prefix_cache_served_is_said() -> None:
    # vLLM counts prompt tokens looked up in its prefix cache and found: a sweep that sent prompts the server
    # had seen prefilled less than a new prompt needs (512 tokens: 8.3 ms of prefill against 16.5).
    law, budget = LAWS[0]
    calibrations = [(f"calib-{p}.json", _calibrate(law, budget, p, levels=(1, 8))) for p in (64, 256)]
    assert prefix_cache_note(calibrations) == ""
    name, results = calibrations[1]
    first, *rest = results.levels
    cached = ServerSample(
        source="vllm",
        samples=20,
        running_mean=1.0,
        waiting_mean=0.0,
        prefix_cache_queried=25_600,
        prefix_cache_hits=24_000,
    )
    calibrations[1] = (name, replace(results, levels=(replace(first, server=cached), *rest)))
    note = prefix_cache_note(calibrations)
    assert "calib-256.json c=1 (94%)" in note and "calib-64" not in note
    assert note in forecast_mix(calibrations, Mix(1024, 128), ()).warnings


def test_replicas_are_never_fewer_than_the_rate_one_replica_holds_implies() -> None:
    """The fleet's simulation and the one-replica rate search read the same engine; where they disagree the
    plan takes the larger count and says why, and where they agree it says nothing."""
    law, budget = LAWS[3]
    calibrations = [(f"calib-{p}.json", _calibrate(law, budget, p)) for p in (256, 512)]
    slos = (SloTarget.from_key("tpot_p95_ms", 80.0), SloTarget.from_key("ttft_p95_ms", 1500.0))
    plan = plan_for_mix(calibrations, PlanRequest(slos=slos, qps=6.75, prompt_tokens=384, output_tokens=64, seed=1))
    assert plan.mix is not None and plan.mix.max_rate_rps and plan.recommended_replicas is not None
    assert plan.recommended_replicas >= math.ceil(6.75 / plan.mix.max_rate_rps)
    assert "raised from" not in (plan.replicas_method or "")
    half = plan.mix.max_rate_rps / 2  # a rate search that read half the rate
    raised = _at_least_the_rate_one_replica_holds(plan, replace(plan.mix, max_rate_rps=half), 6.75)
    assert raised.recommended_replicas == math.ceil(6.75 / half) > plan.recommended_replicas
    assert raised.replicas_method is not None and f"raised from {plan.recommended_replicas}" in raised.replicas_method
