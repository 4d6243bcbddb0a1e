"""The capacity plan: from a sweep (or a stated law) to "cap the batch at B, run R replicas" (pure).

A mix's plan (``planner.capacity.plan_mix``) ends in the same ``finish``.

Steps: observations -> saturation classes -> the step law fitted on the
unsaturated levels (TPOT p50: the throughput law; and each TPOT SLO's own
percentile: the law that SLO is answered with) -> the largest batch under
each SLO -> one batch that every law shown respects -> throughput at that
batch -> replicas (no headroom, utilisation target, simulation) ->
diagnosis. Every answer carries how it was obtained.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from loadgen.engine import EngineConfig
from loadgen.level.aggregates import mean_output_tokens, mean_prompt_tokens, reasoning_share
from loadgen.quantity import Metric
from loadgen.results import Results
from planner.capacity.batch_limit import BatchLimit, floor_note, max_batch_under_slo, model_limit, model_name
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.decode_fit import PREFILL_MATTERS, decode_by_simulation
from planner.capacity.diagnose import Finding, Situation, diagnose
from planner.capacity.predicted import calibration_residual
from planner.capacity.prefill import Prefill, decode_law, estimate_prefill
from planner.capacity.replica_count import (
    ReplicaCount,
    Served,
    count_replicas,
    measured_tokens_per_s,
    served_tokens_per_s,
)
from planner.capacity.request import PlanRequest
from planner.capacity.sizing import NO_REPLICA_COUNT, queueing_slos
from planner.evidence.knee import Saturation
from planner.evidence.observations import Observations
from planner.evidence.verdicts import Verdicts, judge
from planner.laws.batching import batch_utilization
from planner.laws.lengthsample import LengthSample
from planner.laws.stepmodel import StepModel, fit_statistic, fit_step_model
from planner.laws.ttft_residual import TtftResidual

PREFILL_ITL_RATIO = 1.3  # ITL p95 over TPOT p50 beyond this: some steps carry prefill work
MIX_TOLERANCE = 0.2  # planned lengths this far from the swept ones are another mix


def plan_from_results(results: Results, request: PlanRequest) -> CapacityPlan:
    """Plan from a measured run or sweep."""
    verdicts = judge(results.levels, [q for slo in request.slos if (q := slo.quantity) is not None])
    obs, saturation = verdicts.observations, verdicts.saturation
    warnings = list(obs.warnings) + list(verdicts.problems)
    # the throughput law rests on TPOT p50; a source that gives only the mean (a vendor's table) on the mean
    statistic: float | None = (
        50.0 if all(obs.levels[i].tpot_p50_ms is not None for i in saturation.unsaturated) else None
    )
    line = [i for i in saturation.unsaturated if _tpot_ms(obs, i, statistic) is not None]
    fit = _fit(obs, line, statistic, request.seed)
    if fit is None:
        warnings.append(f"only {len(line)} unsaturated level(s) with TPOT: no step law fitted; sweep more levels")
    else:
        warnings += [f"{fit_statistic(statistic)} law: {w}" for w in fit.warnings]
    warnings += _mix_warnings(obs, saturation.unsaturated, request)
    limits = _sweep_limits(verdicts, line, fit, statistic, request, warnings)
    if any(lv.synthesised for lv in results.levels):
        # synthesised histograms answer the table's percentiles, not their confidence intervals
        limits = tuple(
            dataclasses.replace(lim, quality="unknown", more_requests=None)
            if lim.quality in ("resolved", "unresolved")
            else lim
            for lim in limits
        )
        warnings.append("imported numbers: percentile intervals unknown; 'unknown' answers rest on the table alone")
    prefill, share = estimate_prefill(obs, fit, request.prompt_tokens, request.prefill_ms_per_token)
    decode = None
    if fit is not None:
        decode = _simulated_decode(fit, prefill, share, obs, line, warnings)
        if decode is None:
            decode, prefill = decode_law(fit, prefill, share, warnings)
    output_tokens = request.output_tokens or obs.output_tokens_mean
    parts = PlanParts(
        source="sweep",
        fit=fit,
        limits=limits,
        output_tokens=output_tokens,
        prefill=prefill,
        decode=decode,
        verdicts=verdicts,
        swept=results,
        reasoning_share=reasoning_share(results.levels),
    )
    return dataclasses.replace(finish(parts, request, warnings), fit_statistic=fit_statistic(statistic))


def _simulated_decode(
    fit: StepModel, prefill: Prefill, share: float, obs: Observations, line: list[int], warnings: list[str]
) -> StepModel | None:
    """The decode step by simulating the sweep's closed loop (``planner.capacity.decode_fit``), where the
    prefill's share of the fitted slope is large enough that subtracting it decides the engine; None:
    prefill is small beside the slope, or the sweep cannot say (the subtraction then stands)."""
    prompt, output = obs.prompt_tokens_mean, obs.output_tokens_mean
    if prefill.ms_per_token <= 0 or share < PREFILL_MATTERS * max(fit.per_seq_ms, 0.0) or not prompt or not output:
        return None
    law = decode_by_simulation(fit, [obs.results[i] for i in line], prefill.ms_per_token, prompt, output)
    if law is not None:
        warnings.append(
            f"decode step {law.base_ms:.2f} + {law.per_seq_ms:.3g}*b ms: the one whose closed loop, with prefill "
            f"{prefill.ms_per_token:.3g} ms/token ({prefill.source}), reads the sweep's TPOT means; prefill's mean "
            f"share ({share:.3g} ms a sequence) was not taken out of the fitted slope ({fit.per_seq_ms:.3g}), "
            "since prompts prefilled while clients wait for a first token do not slow the running streams"
        )
    return law


def _sweep_limits(
    verdicts: Verdicts,
    line: list[int],
    fit: StepModel | None,
    statistic: float | None,
    request: PlanRequest,
    warnings: list[str],
) -> tuple[BatchLimit, ...]:
    """The largest batch under each SLO the sweep can answer, each TPOT SLO on the law of its own percentile.

    A TTFT or E2E promise is a queueing promise: at a target QPS the sizing simulation judges it on
    open-loop arrivals per replica count, as what-if mode does. The closed-loop levels measured it at
    another load shape, so there it would cap the batch beside a simulation that says otherwise.
    """
    obs = verdicts.observations
    simulated = bool(request.qps and request.simulate) or request.queueing_simulated
    by_simulation = simulated and bool(request.output_tokens or obs.output_tokens_mean)
    queueing = queueing_slos(request.slos, first_output=True) if by_simulation else ()
    if queueing:
        where = f"at {request.qps:g} QPS" if request.qps else "of the fleet"
        warnings.append(
            f"{', '.join(model_name(s) for s in queueing)}: judged by the sizing simulation {where}, "
            "not used to cap the batch (the sweep's closed loop measured it under another load shape)"
        )
    limits = []
    for slo in request.slos:
        if slo.metric is None or slo in queueing:
            continue
        model = None
        if slo.metric == Metric.TPOT:  # TTFT is queueing, ITL sees prefill stalls: measured answers only
            model = fit if slo.percentile == statistic else _fit(obs, line, slo.percentile, request.seed)
            if model is not None and model is not fit:
                warnings += [f"{model_name(slo)} law: {w}" for w in model.warnings]
        limits.append(max_batch_under_slo(obs, verdicts.saturation, slo, model))
    return tuple(limits)


def plan_from_law(model: StepModel, request: PlanRequest) -> CapacityPlan:
    """What-if planning from a stated law (no sweep): docs/design.md's arithmetic, exactly.

    The stated law is the decode step; with ``--prefill-ms-per-token`` the steps also carry
    the prompts' prefill, so every TPOT and throughput figure comes from the law with that
    share added (``Prefill.per_seq_ms``), and the simulation runs the stated law plus prefill.
    """
    prefill = Prefill(
        request.prefill_ms_per_token or 0.0,
        request.prompt_tokens or 0.0,
        "--prefill-ms-per-token"
        if request.prefill_ms_per_token
        else "none (give --prefill-ms-per-token and --prompt-tokens)",
    )
    warnings = []
    if prefill.ms_per_token > 0 and not prefill.prompt_tokens:
        warnings.append("--prefill-ms-per-token without --prompt-tokens: no prefill is counted")
    elif prefill.ms_per_token > 0 and not request.output_tokens:
        warnings.append("--prefill-ms-per-token without --output-tokens: prefill's share of each step is unknown")
    law = model.plus_per_seq(prefill.per_seq_ms(request.output_tokens))
    limits = tuple(
        model_limit(law, slo, cap=request.current_batch)
        for slo in request.slos
        if slo.metric in (Metric.TPOT, Metric.ITL)
    )
    plan = finish(
        PlanParts(
            source="law", fit=law, limits=limits, output_tokens=request.output_tokens, prefill=prefill, decode=model
        ),
        request,
        warnings,
    )
    return dataclasses.replace(plan, fit_statistic="law")


def _sweep_residual(results: Results, engine: EngineConfig) -> TtftResidual | None:
    """TTFT beyond the sweep's own engine (``planner.laws.ttft_residual``), where the sweep says its mix."""
    if mean_prompt_tokens(results.levels) is None or not mean_output_tokens(results.levels):
        return None  # an imported table without usage: no mix to run the engine at
    return calibration_residual(engine, [("the sweep", results)], engine.max_num_batched_tokens, None)


def _tpot_ms(obs: Observations, i: int, percentile: float | None) -> float | None:
    level = obs.results[i]
    return level.mean_ms(Metric.TPOT) if percentile is None else level.percentile_ms(Metric.TPOT, percentile)


def _fit(obs: Observations, line: list[int], percentile: float | None, seed: int) -> StepModel | None:
    """The step law on this percentile of TPOT (None: the mean) over the unsaturated levels (None: < 2 batches)."""
    points = [(obs.levels[i].batch, v) for i in line if (v := _tpot_ms(obs, i, percentile)) is not None]
    if len({x for x, _ in points}) < 2:
        return None
    return fit_step_model([x for x, _ in points], [y for _, y in points], seed=seed)


SAME_OUTPUT = 0.10  # a plan's output length this close to the sweep's reads the sweep's throughput as it is


def _measured_rate(parts: PlanParts, batch: int) -> float | None:
    """Output tok/s the sweep's trusted, unsaturated levels served at ``batch`` (interpolated), where the plan is
    for the lengths it measured; None otherwise (the model answers)."""
    verdicts, swept = parts.verdicts, parts.swept
    if verdicts is None or swept is None or not parts.output_tokens:
        return None
    measured_output = mean_output_tokens(swept.levels)
    if not measured_output or abs(parts.output_tokens / measured_output - 1) > SAME_OUTPUT:
        return None
    obs = verdicts.observations
    points = [
        (obs.levels[i].batch, rate)
        for i in verdicts.saturation.unsaturated
        if verdicts.levels[i].trusted and (rate := obs.levels[i].tokens_per_s) is not None
    ]
    return measured_tokens_per_s(points, batch)


def _lengths(parts: PlanParts, request: PlanRequest) -> LengthSample | None:
    """The requests one replica serves: a dataset's drawn lengths, else the plan's mix (None: no output)."""
    if request.length_sample is not None:
        return request.length_sample
    return LengthSample.fixed(parts.prefill.prompt_tokens, parts.output_tokens) if parts.output_tokens else None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanParts:
    """What one kind of plan (a sweep's, a stated law's, a mix's) hands the pipeline's shared end."""

    source: str  # "sweep" | "law" | "mix"
    fit: StepModel | None  # the mean step with prefill's share in it: every printed figure
    limits: tuple[BatchLimit, ...]
    output_tokens: float | None
    prefill: Prefill
    decode: StepModel | None  # the step without prefill's share, which the sizing simulation runs with it
    verdicts: Verdicts | None = None  # a sweep's levels, judged
    engine: EngineConfig | None = None  # a mix plan's fitted engine; else built from ``decode`` and ``prefill``
    kv_cap: tuple[int, str] | None = None  # the most sequences the KV cache holds whole, and why
    residual: TtftResidual | None = None  # what a mix plan's calibration measured beyond its engine
    swept: Results | None = None  # a one-sweep plan's results, on which the same residual is measured
    reasoning_share: float = 0.0  # of the measured output tokens, the reasoning before each first answer token


def finish(parts: PlanParts, request: PlanRequest, warnings: list[str]) -> CapacityPlan:
    """The pipeline's shared end: one batch every law respects, throughput there, replicas, diagnosis."""
    limits, max_batch, lower_bound, how = _batch(parts, request, warnings)
    fit = parts.fit
    step = float(fit.step_ms(max_batch)) if fit is not None and max_batch else None
    engine = parts.engine or _simulation_engine(parts.decode, parts.prefill, warnings)
    tokens = (
        served_tokens_per_s(fit, engine, max_batch, _lengths(parts, request), _measured_rate(parts, max_batch))
        if fit is not None and max_batch
        else None
    )
    per_replica = float(tokens) if tokens is not None else None
    residual = parts.residual
    simulated_here = bool(request.qps and parts.output_tokens) or request.queueing_simulated  # here, or a fleet's
    if simulated_here and max_batch and request.residual_read and residual is None and parts.swept and engine:
        residual = _sweep_residual(parts.swept, engine)  # the sweep's own, where none came in
    count = None
    if request.qps and parts.output_tokens and fit is not None and max_batch and tokens is not None:
        served = Served(
            fit=fit,
            engine=engine,
            max_batch=max_batch,
            output_tokens=parts.output_tokens,
            step_ms=step,
            prefill=parts.prefill,
            residual=residual,
            tokens_per_s=tokens,
            reasoning_share=parts.reasoning_share,
        )
        count = count_replicas(served, request, warnings)
    decode_shown = parts.decode if parts.decode is not fit else None
    return CapacityPlan(
        source=parts.source,
        verdicts=parts.verdicts,
        fit=fit,
        limits=limits,
        max_batch=max_batch,
        max_batch_lower_bound=lower_bound,
        max_batch_method=how,
        step_ms_at_max_batch=step,
        tokens_per_s_per_replica=per_replica,
        tokens_per_s_per_user=1000.0 / step if step else None,
        prefill=parts.prefill if _prefill_shown(count, fit, decode_shown) else None,
        decode=decode_shown,
        **(count.plan_fields() if count is not None else {}),
        batching=batch_utilization(request.lengths) if request.lengths else None,
        findings=_findings(fit, limits, max_batch, per_replica, request, count, warnings),
        warnings=tuple(warnings),
        engine=engine.capped(max_batch) if engine is not None and max_batch else None,
        ttft_residual=residual if request.residual_read else None,
    )


def _prefill_shown(count: ReplicaCount | None, fit: StepModel | None, decode: StepModel | None) -> bool:
    """The prefill term is shown where the simulation ran with it, or where the law shown holds it apart."""
    return (count is not None and count.simulated is not None) or (fit is not None and decode is not None)


def _batch(
    parts: PlanParts, request: PlanRequest, warnings: list[str]
) -> tuple[tuple[BatchLimit, ...], int | None, bool, str | None]:
    """The batch every SLO, the KV cache and every law shown allow, whether it is a lower bound, and why."""
    saturation = parts.verdicts.saturation if parts.verdicts else None
    limits, max_batch, lower_bound, how = _decide_batch(parts.limits, saturation, request.current_batch)
    kv_cap = parts.kv_cap
    if kv_cap is not None and max_batch is not None and max_batch > kv_cap[0]:
        max_batch, how = kv_cap[0], f"{how}, capped by the KV cache"
        warnings.append(f"batch {kv_cap[0]}: {kv_cap[1]} (the SLOs alone would allow more)")
    if max_batch is not None:
        max_batch, lowered = _respect_laws(max_batch, limits, parts.fit)
        if lowered:
            warnings.append(lowered)
            how = f"{how}, lowered so that every law shown meets its SLO"
    if parts.source == "law" and max_batch is None and not any(lim.batch is None for lim in limits):
        warnings.append(_missing_for_what_if(request))
    return limits, max_batch, lower_bound, how


def _simulation_engine(decode: StepModel | None, prefill: Prefill, warnings: list[str]) -> EngineConfig | None:
    """The engine the sizing simulation runs: the decode step, and prefill charged per admitted prompt."""
    if decode is None:
        return None
    if decode.base_ms < 0:
        warnings.append(
            f"the fitted law's base {decode.base_ms:.2f} ms is below zero (a line through levels that bend): "
            "the sizing simulation runs it at 0, its steps no shorter than the law's"
        )
    return EngineConfig(
        base_ms=max(decode.base_ms, 0.0),
        per_seq_ms=max(decode.per_seq_ms, 0.0),
        prefill_ms_per_token=max(prefill.ms_per_token, 0.0),
    )


def _findings(
    fit: StepModel | None,
    limits: tuple[BatchLimit, ...],
    max_batch: int | None,
    per_replica: float | None,
    request: PlanRequest,
    count: ReplicaCount | None,
    warnings: list[str],
) -> tuple[Finding, ...]:
    """The diagnosis (docs/design.md) of the current batch and replicas against the plan's."""
    floor = next(
        (
            floor_note(lim.model, lim.slo)
            for lim in limits
            if lim.model is not None and lim.quality == "below the floor"
        ),
        None,
    )
    unmet = None
    if count is not None and count.recommended is None:  # no count: the SLO is below one request's own latency
        unmet = next((w for w in warnings if w.startswith(NO_REPLICA_COUNT)), None)
    tpot_slo = next((lim.slo for lim in limits if lim.slo.metric == Metric.TPOT), None)
    current = request.current_batch
    return diagnose(
        Situation(
            slo_key=tpot_slo.key if tpot_slo else None,
            slo_ms=tpot_slo.limit if tpot_slo else None,
            current_batch=current,
            step_ms_at_current=float(fit.step_ms(current)) if fit and current else None,
            max_batch=max_batch,
            floor=floor,
            current_replicas=request.current_replicas,
            needed_replicas=count.recommended if count else None,
            tokens_per_s_at_current=float(fit.tokens_per_s(current)) if fit and current else None,
            tokens_per_s_at_max=per_replica,
            no_replica_count=unmet,
        )
    )


def _decide_batch(
    limits: tuple[BatchLimit, ...], saturation: Saturation | None, current_batch: int | None
) -> tuple[tuple[BatchLimit, ...], int | None, bool, str | None]:
    """The batch every SLO allows, whether it is only a lower bound, and which rule gave it.

    A lower bound above the deciding batch does not bind and is relabelled so,
    so it never asks for more data it does not need.
    """
    if any(lim.batch is None and lim.quality != "any batch" for lim in limits):
        return limits, None, False, None
    bounded = [lim for lim in limits if lim.batch is not None]
    if bounded:
        batch = min(lim.batch for lim in bounded if lim.batch is not None)
        deciding = [lim for lim in bounded if lim.batch == batch]
        limits = tuple(
            dataclasses.replace(
                lim,
                quality="not binding",
                note=f"met at every measured batch up to {lim.batch}, above the {batch} the other SLOs allow",
            )
            if lim.quality == "lower bound" and lim.batch is not None and lim.batch > batch
            else lim
            for lim in limits
        )
        lower = all(lim.is_lower_bound for lim in deciding)
        return limits, batch, lower, "the largest batch under " + ", ".join(model_name(lim.slo) for lim in deciding)
    if saturation is not None and saturation.max_batch is not None:
        return limits, int(saturation.max_batch), False, "the server's saturation plateau B"
    if current_batch is not None:
        return limits, current_batch, False, "--current-batch (no SLO bounds the batch)"
    return limits, None, False, None


def _respect_laws(batch: int, limits: tuple[BatchLimit, ...], fit: StepModel | None) -> tuple[int, str]:
    """Lower ``batch`` until every TPOT law shown meets its SLO there.

    A percentile never lies below the median, so a p95 (or p99) SLO is held
    against its own law and the p50 law: an answer never prints a step
    that breaks the SLO it answers.
    """
    laws = [(lim.slo, lim.model) for lim in limits if lim.slo.metric == Metric.TPOT and lim.model is not None]
    laws += [
        (lim.slo, fit)
        for lim in limits
        if lim.slo.metric == Metric.TPOT
        and fit is not None
        and lim.slo.percentile is not None
        and lim.slo.percentile >= 50
        and lim.model is not fit
    ]
    b = batch
    for slo, law in laws:
        assert law is not None
        while b >= 1 and not law.meets(b, slo.limit):
            b -= 1
    if b == batch:
        return batch, ""
    return max(b, 1), (
        f"the batch was lowered from {batch} to {max(b, 1)}: at {batch} a fitted TPOT law "
        "breaks its SLO (the measured curve and the laws disagree; sweep more levels)"
    )


def _missing_for_what_if(request: PlanRequest) -> str:
    if not request.slos:
        return (
            "nothing to plan from the law alone: give --slo tpot_pNN<MS for the largest batch, "
            "or --current-batch with --qps to size replicas"
        )
    return (
        "no TPOT SLO bounds the batch, so it is the server's cap: give --current-batch (its --max-num-seqs) "
        "to size replicas, or a --slo tpot_pNN<MS"
    )


def _mix_warnings(obs: Observations, line: list[int], request: PlanRequest) -> list[str]:
    """The mix the law holds for, and what to do when the plan asks for another."""
    out = []
    mix = (
        f"prompt ~{obs.prompt_tokens_mean:.0f} / output ~{obs.output_tokens_mean:.0f} tokens"
        if obs.prompt_tokens_mean and obs.output_tokens_mean
        else "the swept prompt/output mix"
    )
    ratios = [  # per token: a gap of several tokens (speculative decoding) is not a slower step
        itl / obs.results[i].tokens_per_gap / tpot
        for i, lv in ((i, obs.levels[i]) for i in line)
        if lv.concurrency >= 2 and (itl := lv.itl_p95_ms) and (tpot := lv.tpot_p50_ms)
    ]
    if ratios and statistics.median(ratios) > PREFILL_ITL_RATIO:
        out.append(
            f"steps that admit prompts are slower (ITL p95 ~{statistics.median(ratios):.2f}x TPOT): "
            f"prefill cost is mixed into the slope, which therefore holds only for {mix}"
        )
    else:
        out.append(f"the law is fitted for {mix}; another mix needs another sweep{_mix_asked(obs, request)}")
    return out


def _mix_asked(obs: Observations, request: PlanRequest) -> str:
    """``: this plan asks for output 200 ...`` where the plan's lengths are another mix than the sweep's."""
    asked = [
        f"{name} {value:,.0f}"
        for name, value, swept in (
            ("prompt", request.prompt_tokens, obs.prompt_tokens_mean),
            ("output", request.output_tokens, obs.output_tokens_mean),
        )
        if value and swept and abs(value / swept - 1) > MIX_TOLERANCE
    ]
    if not asked:
        return ""
    return (
        f": this plan asks for {' / '.join(asked)} tokens, so sweep that mix (or two mixes, and plan from both "
        "files: docs/planning.md) before acting on the batch"
    )
