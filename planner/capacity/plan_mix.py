"""The capacity plan for a mix no sweep measured, from several calibration sweeps (pure).

The step model with lengths (``planner.capacity.mix_forecast``) fitted on every calibration sweep at once
gives the law at the asked mix; the pipeline's shared end (``planner.capacity.plan.finish``) turns it into
a batch and replicas, as for a sweep; then the mix's own answers: the rate one replica holds, the token
budget to set, and the KV cache's limit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from loadgen.engine import EngineConfig
from loadgen.level.aggregates import reasoning_share
from loadgen.results import Results
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.mix_forecast import (
    MixForecast,
    calibration_server_limit,
    forecast_mix,
    inferred_kv_capacity,
    plateau_kv_capacity,
    scraped_kv_capacity,
)
from planner.capacity.plan import PlanParts, finish
from planner.capacity.predicted import alone_prefill_ms, calibration_residual, predicted_lengths
from planner.capacity.prefill import Prefill
from planner.capacity.request import PlanRequest
from planner.capacity.sizing import SIMULATED_METRICS, Traffic, max_rate_per_replica, simulate_replicas
from planner.capacity.token_budget import checked_budget, with_margin
from planner.laws.lengthmodel import Mix
from planner.laws.lengthsample import LengthSample


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
    sizing = forecast.sizing_engine
    prefill = Prefill(
        sizing.prefill_ms_per_token if sizing else 0.0,
        mix.prompt_tokens,
        "the length model (TTFT at concurrency 1 and TPOT, every calibration sweep)"
        + (", every term at the upper end of a request's E2E 95% interval" if forecast.engine_range else ""),
    )
    kv, kv_cap = _kv_cache(calibrations, request, mix, warnings)
    residual = None
    if forecast.engine is not None:  # TTFT beyond the fitted engine: that engine run at each calibration level
        residual = calibration_residual(forecast.engine, calibrations, forecast.model.budget, kv)
        if residual is not None:
            residual = residual.at_prompt(alone_prefill_ms(forecast.engine, mix.prompt_tokens, forecast.model.budget))
        forecast = dataclasses.replace(forecast, ttft_residual=residual)
        if residual is not None and (note := residual.prompt_note()):
            warnings.append(note)
    sized = _sizing_engine(sizing, forecast.model.budget, kv, warnings)
    parts = PlanParts(
        source="mix",
        fit=law,
        limits=forecast.limits,
        output_tokens=mix.output_tokens,
        prefill=prefill,
        decode=law,
        engine=sized,
        kv_cap=kv_cap,
        residual=residual,
        reasoning_share=reasoning_share([lv for _, results in calibrations for lv in results.levels]),
    )
    plan = finish(parts, request, warnings)
    if plan.max_batch and sized is not None and law is not None:
        traffic = Traffic(
            output_tokens=max(1, round(mix.output_tokens)),
            prompt_tokens=mix.prompt_tokens,
            lengths=request.length_sample,
            arrival=request.arrival,
            burstiness=request.burstiness,
            seed=request.seed,
            added_ms=residual.slo_added_ms if residual is not None else None,
            reasoning_share=parts.reasoning_share,
        )
        forecast = _replica_answers(forecast, plan, sized, request, traffic)
        plan = _at_least_the_rate_one_replica_holds(plan, forecast, request.qps)
    if kv_cap is not None:
        forecast = dataclasses.replace(forecast, kv_capacity_tokens=kv, kv_batch=kv_cap[0], kv_note=kv_cap[1])
    if residual is not None and plan.max_batch and (note := residual.reach_note(plan.max_batch)):
        plan = dataclasses.replace(plan, warnings=(*plan.warnings, note))
    return dataclasses.replace(plan, fit_statistic=forecast.model.statistic, mix=forecast)


def _at_least_the_rate_one_replica_holds(plan: CapacityPlan, forecast: MixForecast, qps: float | None) -> CapacityPlan:
    """The replicas raised to ``ceil(qps / largest rate one replica holds)`` where the fleet's own simulation read
    fewer: two simulations of one engine that disagree are settled on the safe side. On the simulator, a
    calibration whose every prompt was chunked sized 3 replicas for 4.05 requests/s where TTFT p95 needs 4
    (2,679 ms against 2,500), beside its own "largest request rate one replica holds: 1.31"."""
    rate, replicas = forecast.max_rate_rps, plan.recommended_replicas
    if not qps or not rate or replicas is None or (needed := math.ceil(qps / rate - 1e-9)) <= replicas:
        return plan
    why = (
        f"raised from {replicas} to {needed}: one replica holds at most {rate:.3g} requests/s under the SLOs "
        f"(its own simulation), and {qps:g} requests/s needs {needed} of them"
    )
    return dataclasses.replace(
        plan,
        recommended_replicas=needed,
        replicas_method=f"{plan.replicas_method}; {why}" if plan.replicas_method else why,
    )


def _kv_cache(
    calibrations: Sequence[tuple[str, Results]], request: PlanRequest, mix: Mix, warnings: list[str]
) -> tuple[int | None, tuple[int, str] | None]:
    """The KV cache's size in tokens and the batch it holds at ``mix``, with where the size came from: given
    (or the simulated server's), said by the server's /metrics, or inferred from a level that filled it."""
    kv = calibration_server_limit(calibrations, "kv_capacity_tokens", request.kv_capacity_tokens)
    said = ""
    if kv is None and (kv := scraped_kv_capacity(calibrations)) is not None:
        said = " (its size as the server's /metrics said it during the calibration: vLLM's cache_config_info)"
    seats = calibration_server_limit(calibrations, "max_num_seqs", request.current_batch)
    if kv is None and (inferred := inferred_kv_capacity(calibrations, seats)) is not None:
        kv, where = inferred
        said = f" (inferred, not told: a calibration level filled it, {where}; give --kv-capacity-tokens where known)"
    if kv is None and (plateau := plateau_kv_capacity(calibrations)) is not None:
        kv, where = plateau
        said = f" (inferred, not told: a calibration sweep plateaued, {where}; give --kv-capacity-tokens where known)"
    if kv is None:
        warnings.append(
            "the KV cache's size is not known (--kv-capacity-tokens; vLLM logs it at start as 'GPU KV cache size: "
            "N tokens'): the batch is not checked against it"
        )
    kv_cap = kv_batch(kv, mix)
    return kv, (kv_cap[0], kv_cap[1] + said) if kv_cap is not None else None


def _sizing_engine(
    engine: EngineConfig | None, budget: int | None, kv: int | None, warnings: list[str]
) -> EngineConfig | None:
    """The fitted engine as the server runs it: its token budget per step and its KV cache, where known (the
    plan caps its batch)."""
    if engine is None:
        return None
    if budget is None:
        warnings.append(
            "the token budget per step is not known (--max-num-batched-tokens): the sizing simulation prefills a "
            "prompt in one step, which is optimistic for TTFT where the server chunks long prompts"
        )
    return engine.serving(1, budget, kv)


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
    forecast: MixForecast, plan: CapacityPlan, engine: EngineConfig, request: PlanRequest, traffic: Traffic
) -> MixForecast:
    """The rate one replica holds at the plan's batch under every SLO, and the token budget to set: the one
    that keeps a prefill chunk under the ITL (or TPOT) SLO, where the sizing simulation at the plan's replicas
    (else at that rate) meets every SLO with it, else the smallest larger one it passes."""
    assert forecast.law is not None and plan.max_batch
    batch = plan.max_batch
    served = engine.capped(batch)
    rate, how = (None, "not simulated (--no-simulate)")
    if request.simulate:
        rate, how = max_rate_per_replica(served, request.slos, traffic)
    if rate is not None and traffic.added_ms is not None and forecast.ttft_residual is not None:
        how = f"{how}; {forecast.ttft_residual.sizing_note}"
    judged = with_margin(tuple(s for s in request.slos if s.metric in SIMULATED_METRICS))
    replicas, qps = (plan.recommended_replicas, request.qps) if request.qps else (1, rate)
    holds = None
    if request.simulate and judged and replicas and qps:

        def holds(budget: int) -> bool:
            law = served.serving(batch, budget, served.kv_capacity_tokens)
            return simulate_replicas(law, replicas, qps, judged, traffic).passed

    where = f"at {replicas} replica{'s' if replicas != 1 else ''} and {qps:.3g} requests/s" if qps else ""
    prompt = float(traffic.lengths.prompt_tokens.max()) if traffic.lengths is not None else traffic.prompt_tokens
    budget, why = checked_budget(forecast.law, served, batch, request.slos, prompt, holds, where)
    return dataclasses.replace(forecast, max_rate_rps=rate, max_rate_note=how, budget=budget, budget_note=why)
