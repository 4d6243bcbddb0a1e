"""The capacity plan for a mix no sweep measured, from several calibration sweeps (pure).

The step model with lengths (``planner.capacity.mixplan``) fitted on every calibration sweep at once
gives the law at the asked mix; the pipeline's shared end (``planner.capacity.plan.finish``) turns it into
a batch and replicas, as for a sweep; then the mix's own answers: the rate one replica holds, the token
budget to set, and the KV cache's limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadgen.results import Metric, Results
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.mixplan import MixForecast, calibration_server_limit, forecast_mix, recommended_budget
from planner.capacity.plan import PlanParts, finish
from planner.capacity.predicted import calibration_residual, predicted_lengths
from planner.capacity.prefill import Prefill
from planner.capacity.request import PlanRequest
from planner.capacity.sizing import Traffic, max_rate_per_replica
from planner.laws.lengthmodel import Mix
from planner.laws.lengthsample import LengthSample
from planner.laws.ttft_residual import TtftResidual


def kv_batch(kv_capacity_tokens: int | None, mix: Mix) -> tuple[int, str] | None:
    """The most sequences of ``mix`` the KV cache holds at their longest (prompt and whole answer): past it
    vLLM preempts a running sequence and computes it again, the latency no step law predicts."""
    if kv_capacity_tokens is None:
        return None
    per_sequence = max(mix.prompt_tokens + mix.output_tokens, 1.0)
    batch = int(kv_capacity_tokens // per_sequence)
    if batch < 1:
        return 1, (
            f"a KV cache of {kv_capacity_tokens:,} tokens does not hold one sequence of {per_sequence:,.0f} "
            "tokens (prompt and answer): the server will refuse such requests or cut them short"
        )
    return batch, (
        f"a KV cache of {kv_capacity_tokens:,} tokens holds {batch} sequences of {per_sequence:,.0f} tokens "
        "(prompt and answer) whole; past that a running sequence is preempted"
    )


def plan_for_mix(calibrations: Sequence[tuple[str, Results]], request: PlanRequest) -> CapacityPlan:
    """Plan for a mix no sweep measured (``request.prompt_tokens`` / ``output_tokens``, or a dataset's lengths)."""
    request, mix, warnings = _mix_lengths(calibrations, request)
    forecast = forecast_mix(calibrations, mix, request.slos, budget=request.token_budget, seed=request.seed)
    warnings = [*forecast.warnings, *warnings]
    law = forecast.law
    prefill = Prefill(
        forecast.engine.prefill_ms_per_token if forecast.engine else 0.0,
        mix.prompt_tokens,
        "the length model (TTFT at concurrency 1 and TPOT, every calibration sweep)",
    )
    kv = calibration_server_limit(calibrations, "kv_capacity_tokens", request.kv_capacity_tokens)
    kv_cap = kv_batch(kv, mix)
    if kv is None:
        warnings.append(
            "the KV cache's size is not known (--kv-capacity-tokens; vLLM logs it at start as 'GPU KV cache size: "
            "N tokens'): the batch is not checked against it"
        )
    residual = None
    if forecast.engine is not None:  # TTFT beyond the fitted engine: that engine run at each calibration level
        residual = calibration_residual(forecast.engine, calibrations, forecast.model.budget, kv)
        forecast = dataclasses.replace(forecast, ttft_residual=residual)
        if residual is not None and (note := residual.prompt_note()):
            warnings.append(note)
    parts = PlanParts(
        "mix",
        law,
        forecast.limits,
        mix.output_tokens,
        prefill,
        law,
        engine=forecast.engine,
        kv_cap=kv_cap,
        residual=residual,
    )
    plan = finish(parts, request, warnings)
    if plan.max_batch and forecast.engine is not None and law is not None:
        forecast = _replica_answers(forecast, plan.max_batch, mix, request, residual)
    if kv_cap is not None:
        forecast = dataclasses.replace(forecast, kv_capacity_tokens=kv, kv_batch=kv_cap[0], kv_note=kv_cap[1])
    if residual is not None and plan.max_batch and (note := residual.reach_note(plan.max_batch)):
        plan = dataclasses.replace(plan, warnings=(*plan.warnings, note))
    return dataclasses.replace(plan, fit_statistic="tpot_p50", mix=forecast)


def _mix_lengths(
    calibrations: Sequence[tuple[str, Results]], request: PlanRequest
) -> tuple[PlanRequest, Mix, list[str]]:
    """The mix to plan for, the request holding its lengths (drawn per request where they vary), and a note
    on where the lengths came from."""
    sample: LengthSample | None = request.length_sample
    if sample is not None:
        mix = sample.mix
        request = dataclasses.replace(request, prompt_tokens=mix.prompt_tokens, output_tokens=mix.output_tokens)
        note = (
            f"lengths from {sample.source}: the batch limits read the length model at the sample's means (context "
            "per sequence-step); the TTFT/E2E simulation draws each request's lengths from the sample"
        )
        return request, mix, [note]
    if request.prompt_tokens is None or not request.output_tokens:
        raise ValueError("a plan for a mix needs its prompt and output tokens per request")
    # without a dataset, the asked means in the calibration's shape, as a predicted level draws them: the
    # batch limits read the length model at that shape's context, and the simulation draws from it
    mix = Mix(request.prompt_tokens, request.output_tokens)
    shaped = predicted_lengths(calibrations, mix, None)
    if shaped.varies:
        mix = dataclasses.replace(mix, context=shaped.mix.context)
        request = dataclasses.replace(request, length_sample=shaped)
    return request, mix, []


def _replica_answers(
    forecast: MixForecast, max_batch: int, mix: Mix, request: PlanRequest, residual: TtftResidual | None
) -> MixForecast:
    """The rate one replica holds at the batch under every SLO, and the token budget that keeps a prefill
    chunk under the ITL (or TPOT) SLO."""
    assert forecast.engine is not None and forecast.law is not None
    engine = dataclasses.replace(forecast.engine, max_num_seqs=max_batch)
    rate, how = (None, "not simulated (--no-simulate)")
    if request.simulate:
        rate, how = max_rate_per_replica(
            engine,
            request.slos,
            Traffic(
                max(1, round(mix.output_tokens)),
                prompt_tokens=mix.prompt_tokens,
                lengths=request.length_sample,
                arrival=request.arrival,
                burstiness=request.burstiness,
                seed=request.seed,
                added_ms=residual.slo_added_ms if residual is not None else None,
            ),
        )
    if rate is not None and residual is not None:
        how = f"{how}; {residual.sizing_note}"
    latency = next((s for s in request.slos if s.metric == Metric.ITL), None) or next(
        (s for s in request.slos if s.metric == Metric.TPOT), None
    )
    budget, why = (None, "no ITL or TPOT SLO to keep a prefill chunk under")
    if latency is not None:
        budget, why = recommended_budget(forecast.law, engine, max_batch, latency.limit, mix.prompt_tokens)
    return dataclasses.replace(forecast, max_rate_rps=rate, max_rate_note=how, budget=budget, budget_note=why)
