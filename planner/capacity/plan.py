"""The capacity plan: from a sweep (or a stated law) to "cap the batch at B, run R replicas" (pure).

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.engine import EngineConfig
from loadgen.load import Arrival
from loadgen.results import Metric, Results, SloTarget, mean_output_tokens, mean_prompt_tokens
from planner.capacity.diagnose import Finding, diagnose
from planner.capacity.mixplan import MixForecast, calibration_server_limit, forecast_mix, recommended_budget
from planner.capacity.predicted import calibration_residual, predicted_lengths
from planner.capacity.replay import Correction
from planner.capacity.sizing import (
    NO_REPLICA_COUNT,
    NoReplicaCount,
    ReplicaPlan,
    SimOutcome,
    max_rate_per_replica,
    queueing_slos,
    replicas_by_simulation,
    replicas_for,
)
from planner.capacity.slo import BatchLimit, floor_note, max_batch_under_slo, model_limit, model_name
from planner.evidence.knee import Saturation
from planner.evidence.observations import Observations
from planner.evidence.verdicts import Verdicts, judge
from planner.laws.batching import BatchUtilization, batch_utilization
from planner.laws.lengthmodel import IDLE_CONCURRENCY, Mix, ttft_at_idle
from planner.laws.lengthsample import LengthSample
from planner.laws.stepmodel import StepModel, fit_statistic, fit_step_model, prefill_share_ms
from planner.laws.ttft_residual import TtftResidual

PREFILL_ITL_RATIO = 1.3  # ITL p95 over TPOT p50 beyond this: some steps carry prefill work


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What the user wants to know."""

    slos: tuple[SloTarget, ...] = ()
    qps: float | None = None
    output_tokens: float | None = None  # per request; default: the sweep's mean
    max_utilization: float = 0.8
    current_batch: int | None = None
    current_replicas: int | None = None
    arrival: Arrival = Arrival.POISSON
    burstiness: float = 1.0
    lengths: tuple[int, ...] | None = None  # static vs continuous demonstration
    simulate: bool = True
    seed: int = 0
    prefill_ms_per_token: float | None = None  # default: fitted from TTFT at concurrency 1, if measured
    prompt_tokens: float | None = None  # per request, for the prefill term; default: the sweep's mean
    length_sample: LengthSample | None = None  # a mix plan's lengths drawn per request (a dataset's), not means
    token_budget: int | None = None  # a mix plan's calibration server's tokens per step (chunked prefill)
    kv_capacity_tokens: int | None = None  # a mix plan's server's KV cache, in tokens (vLLM logs it at start)
    queueing_simulated: bool = False  # TTFT/E2E SLOs are judged by a fleet's simulation (no QPS here), not the batch
    correction: Correction | None = None  # how the endpoint served an open-loop run (``--validate``): replicas use it


@dataclass(frozen=True, slots=True)
class Prefill:
    """The prefill a step that admits prompts pays, and where it came from.

    One step model (DESIGN.md): a running sequence's prompt is prefilled once in its
    ``output_tokens`` steps, so the mean step at batch b is the decode law plus
    ``b * per_seq_ms(output_tokens)``. A law fitted on a sweep's TPOT already holds that
    share; a law stated by hand does not.
    """

    ms_per_token: float
    prompt_tokens: float
    source: str  # "--prefill-ms-per-token", "fitted from TTFT at c=1", or why there is none

    def per_seq_ms(self, output_tokens: float | None) -> float:
        """Prefill's share of the mean step per running sequence (0 without a term or an output length)."""
        return prefill_share_ms(self.ms_per_token, self.prompt_tokens, output_tokens)


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    source: str  # "sweep" | "law"
    verdicts: Verdicts | None  # per level: saturation state and trust (None for a what-if)
    fit: StepModel | None  # TPOT p50 (the mean where a source gives no p50): the throughput law (or the law given)
    limits: tuple[BatchLimit, ...]  # each carries the law fitted on its own percentile
    max_batch: int | None
    max_batch_lower_bound: bool  # the sweep never reached the deciding SLO: at least max_batch
    max_batch_method: str | None  # which rule gave max_batch
    step_ms_at_max_batch: float | None
    tokens_per_s_per_replica: float | None
    tokens_per_s_per_user: float | None
    sizing: ReplicaPlan | None
    prefill: Prefill | None  # what the steps carry and the simulation used (None: no prefill term, no simulation)
    decode: StepModel | None  # the step without prefill's share, where it differs from ``fit``
    simulated: SimOutcome | None
    simulated_below: SimOutcome | None
    recommended_replicas: int | None
    replicas_method: str | None
    batching: BatchUtilization | None
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...]
    fit_statistic: str = "tpot_p50"  # what ``fit`` was fitted on ("law": stated by hand)
    mix: MixForecast | None = None  # source "mix": what the length model predicts for the asked mix
    engine: EngineConfig | None = None  # the engine the sizing simulation runs, batch capped at max_batch
    # what TTFT holds beyond ``engine`` (``planner.laws.ttft_residual``), where a simulation judges a TTFT/E2E SLO
    # with it: ``plan --qps``'s sizing, a fleet's mu_slo and replay (``queueing_simulated``)
    ttft_residual: TtftResidual | None = None

    @property
    def observations(self) -> Observations | None:
        return self.verdicts.observations if self.verdicts else None

    @property
    def saturation(self) -> Saturation | None:
        return self.verdicts.saturation if self.verdicts else None

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)


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
    warnings += _mix_warnings(obs, saturation.unsaturated)
    limits = []
    # A TTFT or E2E promise is a queueing promise: at a target QPS the sizing simulation judges it on
    # open-loop arrivals per replica count, as what-if mode does. The closed-loop levels measured it at
    # another load shape, so there it would cap the batch beside a simulation that says otherwise.
    simulated = bool(request.qps and request.simulate) or request.queueing_simulated
    by_simulation = simulated and bool(request.output_tokens or obs.output_tokens_mean)
    queueing = queueing_slos(request.slos) if by_simulation else ()
    if queueing:
        where = f"at {request.qps:g} QPS" if request.qps else "of the fleet"
        warnings.append(
            f"{', '.join(model_name(s) for s in queueing)}: judged by the sizing simulation {where}, "
            "not used to cap the batch (the sweep's closed loop measured it under another load shape)"
        )
    for slo in request.slos:
        if slo.metric is None or slo in queueing:
            continue
        model = None
        if slo.metric == Metric.TPOT:  # TTFT is queueing, ITL sees prefill stalls: measured answers only
            model = fit if slo.percentile == statistic else _fit(obs, line, slo.percentile, request.seed)
            if model is not None and model is not fit:
                warnings += [f"{model_name(slo)} law: {w}" for w in model.warnings]
        limits.append(max_batch_under_slo(obs, saturation, slo, model))
    if any(lv.synthesised for lv in results.levels):
        # synthesised histograms answer the table's percentiles, not their confidence intervals
        limits = [
            dataclasses.replace(lim, quality="unknown", more_requests=None)
            if lim.quality in ("resolved", "unresolved")
            else lim
            for lim in limits
        ]
        warnings.append("imported numbers: percentile intervals unknown; 'unknown' answers rest on the table alone")
    output_tokens = request.output_tokens or obs.output_tokens_mean
    prefill, share = _prefill(obs, fit, request)
    decode = None
    if fit is not None:
        decode, prefill = _decode_law(fit, prefill, share, warnings)
    plan = _finish(
        "sweep", verdicts, fit, tuple(limits), request, output_tokens, warnings, prefill, decode, swept=results
    )
    return dataclasses.replace(plan, fit_statistic=fit_statistic(statistic))


def plan_from_law(model: StepModel, request: PlanRequest) -> CapacityPlan:
    """What-if planning from a stated law (no sweep): the chapter's arithmetic, exactly.

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
    plan = _finish("law", None, law, limits, request, request.output_tokens, warnings, prefill, model)
    return dataclasses.replace(plan, fit_statistic="law")


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
    """Plan for a mix no sweep measured (``request.prompt_tokens`` / ``output_tokens``), from the step
    model with lengths fitted on every calibration sweep at once (``planner.capacity.mixplan``)."""
    sample = request.length_sample
    dataset_note = None
    if sample is not None:
        mix = sample.mix
        request = dataclasses.replace(request, prompt_tokens=mix.prompt_tokens, output_tokens=mix.output_tokens)
        dataset_note = (
            f"lengths from {sample.source}: the batch limits read the length model at the sample's means (context "
            "per sequence-step); the TTFT/E2E simulation draws each request's lengths from the sample"
        )
    elif request.prompt_tokens is None or not request.output_tokens:
        raise ValueError("a plan for a mix needs its prompt and output tokens per request")
    else:
        # without a dataset, the asked means in the calibration's shape, as a predicted level draws them: the
        # batch limits read the length model at that shape's context, and the simulation draws from it
        mix = Mix(request.prompt_tokens, request.output_tokens)
        shaped = predicted_lengths(calibrations, mix, None)
        if shaped.varies:
            sample, mix = shaped, dataclasses.replace(mix, context=shaped.mix.context)
            request = dataclasses.replace(request, length_sample=sample)
    forecast = forecast_mix(calibrations, mix, request.slos, budget=request.token_budget, seed=request.seed)
    warnings = list(forecast.warnings)
    if dataset_note is not None:
        warnings.append(dataset_note)
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
    plan = _finish(
        "mix",
        None,
        law,
        forecast.limits,
        request,
        mix.output_tokens,
        warnings,
        prefill,
        law,
        forecast.engine,
        kv_cap,
        residual,
    )
    if plan.max_batch and forecast.engine is not None and law is not None:
        engine = dataclasses.replace(forecast.engine, max_num_seqs=plan.max_batch)
        rate, how = (None, "not simulated (--no-simulate)")
        if request.simulate:
            rate, how = max_rate_per_replica(
                engine,
                max(1, round(mix.output_tokens)),
                request.slos,
                prompt_tokens=mix.prompt_tokens,
                lengths=sample,
                arrival=request.arrival,
                burstiness=request.burstiness,
                seed=request.seed,
                added_ms=residual.slo_added_ms if residual is not None else None,
            )
        if rate is not None and residual is not None:
            how = f"{how}; {residual.sizing_note}"
        latency = next((s for s in request.slos if s.metric == Metric.ITL), None) or next(
            (s for s in request.slos if s.metric == Metric.TPOT), None
        )
        budget, why = (None, "no ITL or TPOT SLO to keep a prefill chunk under")
        if latency is not None:
            budget, why = recommended_budget(law, engine, plan.max_batch, latency.limit, mix.prompt_tokens)
        forecast = dataclasses.replace(forecast, max_rate_rps=rate, max_rate_note=how, budget=budget, budget_note=why)
    if kv_cap is not None:
        forecast = dataclasses.replace(forecast, kv_capacity_tokens=kv, kv_batch=kv_cap[0], kv_note=kv_cap[1])
    if residual is not None and plan.max_batch and (note := residual.reach_note(plan.max_batch)):
        plan = dataclasses.replace(plan, warnings=(*plan.warnings, note))
    return dataclasses.replace(plan, fit_statistic="tpot_p50", mix=forecast)


def _residual_read(request: PlanRequest) -> bool:
    """Whether the sizing simulation reads a residual: it judges a TTFT/E2E SLO, and no correction
    measured on the endpoint replaces it."""
    return request.simulate and request.correction is None and bool(queueing_slos(request.slos))


def _sweep_residual(results: Results, engine: EngineConfig) -> TtftResidual | None:
    """TTFT beyond the sweep's own engine (``planner.laws.ttft_residual``), where the sweep says its mix."""
    if mean_prompt_tokens(results.levels) is None or not mean_output_tokens(results.levels):
        return None  # an imported table without usage: no mix to run the engine at
    return calibration_residual(engine, [("the sweep", results)], engine.max_num_batched_tokens, None)


def _prefill(obs: Observations, fit: StepModel | None, request: PlanRequest) -> tuple[Prefill, float]:
    """The prefill term, and its share of the fitted slope (ms per running sequence per step).

    As given, else what a concurrency-1 level's TTFT holds beyond one step. At concurrency 1 a
    request arrives at an idle engine, so its TTFT (from sent; a closed loop's TTFT is the same) is
    the decode step of batch 1 plus its whole prompt's prefill (and the network's round trip, which
    this counts as prefill: the conservative side). The fitted step(1) already holds prefill's share
    P/O of that prompt, so the difference is P * (1 - 1/O) of prefill.
    """
    prompt = request.prompt_tokens or obs.prompt_tokens_mean or 0.0
    swept_prompt, swept_output = obs.prompt_tokens_mean or 0.0, obs.output_tokens_mean
    if request.prefill_ms_per_token is not None:
        given = Prefill(request.prefill_ms_per_token, prompt, "--prefill-ms-per-token")
        return given, Prefill(given.ms_per_token, swept_prompt, given.source).per_seq_ms(swept_output)
    single = next(
        (
            (lv.label, ttft)
            for lv, level in zip(obs.levels, obs.results)
            if lv.concurrency < IDLE_CONCURRENCY and (ttft := ttft_at_idle(level)) is not None
        ),
        None,
    )
    if single is None:
        return Prefill(0.0, prompt, "none: no level ran at concurrency 1 (give --prefill-ms-per-token)"), 0.0
    if fit is None or not swept_prompt:
        why = "no step law was fitted" if fit is None else "the sweep's prompt length is unknown"
        return Prefill(0.0, prompt, f"none: {why} (give --prefill-ms-per-token)"), 0.0
    label, ttft = single
    held = 1 - 1 / swept_output if swept_output and swept_output > 1 else 1.0
    per_token = max(ttft - float(fit.step_ms(1)), 0.0) / (swept_prompt * held)
    fitted = Prefill(per_token, prompt, f"fitted from TTFT at {label}")
    return fitted, Prefill(per_token, swept_prompt, fitted.source).per_seq_ms(swept_output)


def _tpot_ms(obs: Observations, i: int, percentile: float | None) -> float | None:
    level = obs.results[i]
    return level.mean_ms(Metric.TPOT) if percentile is None else level.percentile_ms(Metric.TPOT, percentile)


def _fit(obs: Observations, line: list[int], percentile: float | None, seed: int) -> StepModel | None:
    """The step law on this percentile of TPOT (None: the mean) over the unsaturated levels (None: < 2 batches)."""
    points = [(obs.levels[i].batch, v) for i in line if (v := _tpot_ms(obs, i, percentile)) is not None]
    if len({x for x, _ in points}) < 2:
        return None
    return fit_step_model([x for x, _ in points], [y for _, y in points], seed=seed)


def _finish(
    source: str,
    verdicts: Verdicts | None,
    fit: StepModel | None,
    limits: tuple[BatchLimit, ...],
    request: PlanRequest,
    output_tokens: float | None,
    warnings: list[str],
    prefill: Prefill,
    decode: StepModel | None,
    engine: EngineConfig | None = None,
    kv_cap: tuple[int, str] | None = None,
    residual: TtftResidual | None = None,
    swept: Results | None = None,
) -> CapacityPlan:
    """``fit`` is the mean step with prefill's share in it (every printed figure); ``decode`` the step
    without it, which the sizing simulation runs with the prefill term: one step model, prefill once.
    ``kv_cap``: the most sequences the KV cache holds whole, and why (a mix plan's). ``residual``: what a mix
    plan's calibration measured beyond its fitted engine (TTFT/E2E SLOs read it; a correction replaces it);
    ``swept``: a one-sweep plan's results, on which the same residual is measured for its sizing."""
    saturation = verdicts.saturation if verdicts else None
    limits, max_batch, lower_bound, how = _decide_batch(limits, saturation, request.current_batch)
    if kv_cap is not None and max_batch is not None and max_batch > kv_cap[0]:
        max_batch, how = kv_cap[0], f"{how}, capped by the KV cache"
        warnings.append(f"batch {kv_cap[0]}: {kv_cap[1]} (the SLOs alone would allow more)")
    if max_batch is not None:
        max_batch, lowered = _respect_laws(max_batch, limits, fit)
        if lowered:
            warnings.append(lowered)
            how = f"{how}, lowered so that every law shown meets its SLO"
    if source == "law" and max_batch is None and not any(lim.batch is None for lim in limits):
        warnings.append(_missing_for_what_if(request))
    step = float(fit.step_ms(max_batch)) if fit is not None and max_batch else None
    per_replica = float(fit.tokens_per_s(max_batch)) if fit is not None and max_batch else None
    sizing = simulated = below = None
    recommended, method, unmet = None, None, None
    if engine is None and decode is not None:
        if decode.base_ms < 0:
            warnings.append(
                f"the fitted law's base {decode.base_ms:.2f} ms is below zero (a line through levels that bend): "
                "the sizing simulation runs it at 0, its steps no shorter than the law's"
            )
        engine = EngineConfig(
            base_ms=max(decode.base_ms, 0.0),
            per_seq_ms=max(decode.per_seq_ms, 0.0),
            prefill_ms_per_token=max(prefill.ms_per_token, 0.0),
        )
    simulated_here = bool(request.qps and output_tokens) or request.queueing_simulated  # here, or by a fleet
    sweep_read = simulated_here and bool(max_batch) and _residual_read(request)  # its residual, where none came in
    if sweep_read and residual is None and swept is not None and engine is not None:
        residual = _sweep_residual(swept, engine)
    if request.qps and output_tokens and fit is not None and max_batch:
        sizing, simulated, below, recommended, method = _size(
            fit, engine, max_batch, request, output_tokens, step, warnings, prefill, residual
        )
        if recommended is None:  # the simulation found no count: the SLO is below one request's own latency
            unmet = next((w for w in warnings if w.startswith(NO_REPLICA_COUNT)), None)
        if request.correction is not None:
            method = f"{method}; corrected by the endpoint ({request.correction.text})"
        elif residual is not None and simulated is not None:
            method = f"{method}; {residual.sizing_note}"
    floor = next(
        (
            floor_note(lim.model, lim.slo)
            for lim in limits
            if lim.model is not None and lim.quality == "below the floor"
        ),
        None,
    )
    tpot_slo = next((lim.slo for lim in limits if lim.slo.metric == Metric.TPOT), None)
    findings = diagnose(
        slo_key=tpot_slo.key if tpot_slo else None,
        slo_ms=tpot_slo.limit if tpot_slo else None,
        current_batch=request.current_batch,
        step_ms_at_current=float(fit.step_ms(request.current_batch)) if fit and request.current_batch else None,
        max_batch=max_batch,
        floor=floor,
        current_replicas=request.current_replicas,
        needed_replicas=recommended,
        tokens_per_s_at_current=float(fit.tokens_per_s(request.current_batch))
        if fit and request.current_batch
        else None,
        tokens_per_s_at_max=per_replica,
        no_replica_count=unmet,
    )
    return CapacityPlan(
        source,
        verdicts,
        fit,
        limits,
        max_batch,
        lower_bound,
        how,
        step,
        per_replica,
        1000.0 / step if step else None,
        sizing,
        prefill if simulated is not None or (fit is not None and decode is not None and decode is not fit) else None,
        decode if decode is not fit else None,
        simulated,
        below,
        recommended,
        method,
        batch_utilization(request.lengths) if request.lengths else None,
        findings,
        tuple(warnings),
        engine=dataclasses.replace(engine, max_num_seqs=max_batch) if engine is not None and max_batch else None,
        ttft_residual=residual if _residual_read(request) else None,
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


def _decode_law(fit: StepModel, prefill: Prefill, share: float, warnings: list[str]) -> tuple[StepModel, Prefill]:
    """The decode step a fitted law holds beside prefill's ``share``, so the simulation counts prefill once.

    A share larger than the fitted slope means the prefill estimate (from TTFT at c=1, which also
    holds the network's round trip) overstates it: it is cut to what the slope holds, and said.
    """
    if share <= 0:
        return fit, prefill
    if fit.per_seq_ms <= 0 or fit.base_ms <= 0:
        # with no base, the slope is all the step there is: taking prefill's share out leaves no decode
        what = "no slope" if fit.per_seq_ms <= 0 else "no base above zero"
        warnings.append(
            f"the fitted law has {what} to hold prefill apart: the simulation counts no separate prefill "
            "(the law's slope holds it on average)"
        )
        return fit, dataclasses.replace(prefill, ms_per_token=0.0)
    if share > fit.per_seq_ms:
        scaled = prefill.ms_per_token * fit.per_seq_ms / share
        warnings.append(
            f"prefill {prefill.ms_per_token:.3g} ms/token ({prefill.source}) is more than the fitted slope holds; "
            f"the simulation uses {scaled:.3g}"
        )
        prefill, share = dataclasses.replace(prefill, ms_per_token=scaled), fit.per_seq_ms
    return fit.plus_per_seq(-share), prefill


def _size(
    fit: StepModel,
    engine: EngineConfig | None,
    max_batch: int,
    request: PlanRequest,
    output_tokens: float,
    step: float | None,
    warnings: list[str],
    prefill: Prefill,
    residual: TtftResidual | None,
) -> tuple[ReplicaPlan, SimOutcome | None, SimOutcome | None, int | None, str]:
    """Replicas: the utilisation rule, and a simulation when an SLO it can judge is given; the larger wins.

    With a correction measured on the endpoint both run its slower (or faster) steps, and a TTFT or E2E
    limit leaves room for the TTFT the engine does not hold."""
    assert request.qps is not None
    judged = queueing_slos(request.slos)
    if (correction := request.correction) is not None:
        factor = correction.step_factor
        fit = dataclasses.replace(fit, base_ms=fit.base_ms * factor, per_seq_ms=fit.per_seq_ms * factor)
        engine = correction.engine(engine) if engine is not None else None
        step = step * factor if step else None
        for slo in request.slos:
            if slo.metric == Metric.TPOT and step and step > slo.limit:
                warnings.append(
                    f"the endpoint's steps ran x{factor:.3g} the sweep's law: at batch {max_batch} a step takes "
                    f"{step:.1f} ms there, over {slo.key} {slo.limit:g}: the batch was sized on the sweep's law; "
                    "re-sweep the server as it runs now, or validate at a smaller --max-num-seqs"
                )
    e2e_s = step * output_tokens / 1000.0 if step else None
    sizing = replicas_for(
        request.qps,
        output_tokens,
        fit.tokens_per_s_exact(max_batch),
        max_utilization=request.max_utilization,
        e2e_s=e2e_s,
    )
    rule = f"utilization target {request.max_utilization:g}"
    if not request.simulate or not judged or engine is None:
        if not judged:
            warnings.append("no TTFT or E2E SLO given: replicas from the utilization target, not checked by simulation")
        return sizing, None, None, sizing.replicas_at_utilization, rule
    law = dataclasses.replace(engine, max_num_seqs=max_batch)
    try:
        simulated, below = replicas_by_simulation(
            law,
            request.qps,
            max(1, round(output_tokens)),
            judged,
            start=sizing.replicas_no_headroom,
            prompt_tokens=prefill.prompt_tokens,
            lengths=request.length_sample,
            arrival=request.arrival,
            burstiness=request.burstiness,
            seed=request.seed,
            added_ms=correction.added_ms if correction is not None else residual.slo_added_ms if residual else None,
        )
    except NoReplicaCount as exc:  # no count to act on: saying the utilization rule's would promise the SLO
        warnings.append(str(exc))
        return sizing, None, None, None, f"none: {exc}"
    shape = "Poisson" if request.arrival == "poisson" else f"{request.arrival} (burstiness {request.burstiness:g})"
    term = (
        f"prefill {prefill.ms_per_token:.3g} ms/token x {prefill.prompt_tokens:.0f} prompt tokens: {prefill.source}"
        if prefill.ms_per_token > 0
        else f"prefill {prefill.source}"
    )
    if law.per_kv_ms > 0:
        term += f", KV reads {law.per_kv_ms:.3g} ms per 1k tokens"
    if law.prefill_attention_ms > 0:
        term += f", prefill attention {law.prefill_attention_ms:.3g} ms per 1M token pairs"
    if request.length_sample is not None:
        term += f", lengths drawn from {request.length_sample.source}"
    sim = f"simulation ({shape} arrivals, batch capped at {max_batch}, {term})"
    if simulated.replicas > sizing.replicas_at_utilization:
        return (
            sizing,
            simulated,
            below,
            simulated.replicas,
            f"{sim}; above the {rule}'s {sizing.replicas_at_utilization}",
        )
    return (sizing, simulated, below, sizing.replicas_at_utilization, f"{rule}; the {sim} needs {simulated.replicas}")


def _mix_warnings(obs: Observations, line: list[int]) -> list[str]:
    out = []
    mix = (
        f"prompt ~{obs.prompt_tokens_mean:.0f} / output ~{obs.output_tokens_mean:.0f} tokens"
        if obs.prompt_tokens_mean and obs.output_tokens_mean
        else "the swept prompt/output mix"
    )
    ratios = [
        itl / tpot
        for lv in (obs.levels[i] for i in line)
        if lv.concurrency >= 2 and (itl := lv.itl_p95_ms) and (tpot := lv.tpot_p50_ms)
    ]
    if ratios and statistics.median(ratios) > PREFILL_ITL_RATIO:
        out.append(
            f"steps that admit prompts are slower (ITL p95 ~{statistics.median(ratios):.2f}x TPOT): "
            f"prefill cost is mixed into the slope, which therefore holds only for {mix}"
        )
    else:
        out.append(f"the law is fitted for {mix}; another mix needs another sweep")
    return out


def _model_json(m: StepModel | None, statistic: str) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "statistic": statistic,
        "base_ms": m.base_ms,
        "per_seq_ms": m.per_seq_ms,
        "fitted_batch_range": list(m.fitted_batch_range) if m.n_levels else None,
        "n_levels": m.n_levels,
        "r_squared": m.r_squared,
        "residual_mad_ms": m.residual_mad_ms,
        "base_ci_ms": list(m.base_ci_ms) if m.base_ci_ms else None,
        "per_seq_ci_ms": list(m.per_seq_ci_ms) if m.per_seq_ci_ms else None,
        "outlier_levels": list(m.outlier_levels),
        "extrapolates": m.extrapolates,
        "warnings": list(m.warnings),
    }


def _mix_json(f: MixForecast) -> dict[str, Any]:
    m = f.model
    return {
        "predicted_for": {
            "prompt_tokens": f.mix.prompt_tokens,
            "output_tokens": f.mix.output_tokens,
            "context_tokens": f.mix.context_tokens,
        },
        "label": "predicted for a mix not measured",
        "extrapolation": list(f.extrapolation),
        "length_model": {
            "statistic": m.statistic,
            "coefficients": {
                c.name: {"value": c.value, "ci": list(c.ci) if c.ci else None, "note": c.note or None}
                for c in m.coefficients
            },
            "not_separated": list(m.not_separated),
            "calibrated_range": {k: list(v) for k, v in m.ranges().items()},
            "token_budget": m.budget,
            "r_squared": m.r_squared,
            "median_relative_residual": m.residual_mad,
            "outliers": list(m.outliers),
            "rows": [
                {
                    "label": p.label,
                    "kind": p.kind,
                    "batch": p.batch,
                    "prompt_tokens": p.mix.prompt_tokens,
                    "output_tokens": p.mix.output_tokens,
                    "value_ms": p.value_ms,
                }
                for p in m.points
            ],
        },
        "law_at_mix": _model_json(f.law, "predicted tpot_p50"),
        "max_rate_rps_per_replica": f.max_rate_rps,
        "max_rate_method": f.max_rate_note,
        "max_num_batched_tokens": f.budget,
        "max_num_batched_tokens_method": f.budget_note,
        "kv_capacity_tokens": f.kv_capacity_tokens,
        "kv_max_batch": f.kv_batch,
        "kv_max_batch_method": f.kv_note or None,
        "ttft_residual": [
            {
                "percentile": t.percentile,
                "at_one_client_ms": t.at_one_ms,
                "per_added_client_ms": t.per_client_ms,
                "per_added_client_ci_ms": list(t.line.per_seq_ci_ms) if t.line and t.line.per_seq_ci_ms else None,
                "levels": len(t.rows),
            }
            for t in (f.ttft_residual.terms if f.ttft_residual is not None else ())
        ],
    }


def _to_json(p: CapacityPlan) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": p.source,
        "batch_axis": p.observations.batch_source if p.observations else None,
        "max_batch": p.max_batch,
        "max_batch_lower_bound": p.max_batch_lower_bound,
        "max_batch_method": p.max_batch_method,
        "step_ms_at_max_batch": p.step_ms_at_max_batch,
        "tokens_per_s_per_replica": p.tokens_per_s_per_replica,
        "tokens_per_s_per_user": p.tokens_per_s_per_user,
        "replicas_no_headroom": p.sizing.replicas_no_headroom if p.sizing else None,
        "replicas": p.recommended_replicas,
        "replicas_method": p.replicas_method,
        "fit": _model_json(p.fit, p.fit_statistic),
        "saturation": None,
        "slo": [
            {
                "key": lim.slo.key,
                "limit": lim.slo.limit,
                "measured": lim.measured,
                "measured_batch": lim.measured_batch,
                "model_batch": lim.model_batch,
                "batch": lim.batch,
                "lower_bound": lim.is_lower_bound,
                "quality": lim.quality,
                "more_requests": lim.more_requests,
                "note": lim.note,
                "law": _model_json(lim.model, model_name(lim.slo) if p.source == "sweep" else "law"),
            }
            for lim in p.limits
        ],
        "sizing": dataclasses.asdict(p.sizing) if p.sizing else None,
        "prefill": dataclasses.asdict(p.prefill) if p.prefill else None,
        "simulated": dataclasses.asdict(p.simulated) if p.simulated else None,
        "simulated_below": dataclasses.asdict(p.simulated_below) if p.simulated_below else None,
        "batching": dataclasses.asdict(p.batching) if p.batching else None,
        "observations": [dataclasses.asdict(lv) for lv in p.observations.levels] if p.observations else [],
        "diagnosis": [dataclasses.asdict(f) for f in p.findings],
        "warnings": list(p.warnings),
        "mix": _mix_json(p.mix) if p.mix is not None else None,
    }
    if p.verdicts is not None:
        out["saturation"] = {
            "max_batch": p.verdicts.saturation.max_batch,
            "signals": list(p.verdicts.saturation.agreed),
            "levels": [
                {
                    "label": v.label,
                    "state": v.state,
                    "signals": list(v.signals),
                    "trusted": v.trusted,
                    "problems": list(v.problems),
                }
                for v in p.verdicts.levels
            ],
        }
    return out
