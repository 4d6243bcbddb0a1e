"""The capacity plan: from a sweep (or a stated law) to "cap the batch at B, run R replicas" (pure).

Steps: observations -> saturation classes -> the step law fitted on the
unsaturated levels (TPOT p50 and p95) -> the largest batch under each SLO ->
throughput at that batch -> replicas (no headroom, utilisation target,
simulation) -> diagnosis. Every answer carries how it was obtained.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from loadgen.results import Metric, Results, SloTarget
from loadgen.schedule import Arrival
from planner.batching import BatchUtilization, batch_utilization
from planner.diagnose import Finding, diagnose
from planner.knee import Saturation, classify
from planner.observations import Observations, from_results
from planner.sizing import ReplicaPlan, SimOutcome, replicas_by_simulation, replicas_for
from planner.slo import BatchLimit, max_batch_under_slo, model_limit
from planner.stepmodel import StepModel, fit_step_model

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
    arrival: Arrival = "poisson"
    burstiness: float = 1.0
    lengths: tuple[int, ...] | None = None  # static vs continuous demonstration
    simulate: bool = True
    seed: int = 0


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    source: str  # "sweep" | "law"
    observations: Observations | None
    saturation: Saturation | None
    fit: StepModel | None  # TPOT p50 (or the law given)
    fit_p95: StepModel | None
    limits: tuple[BatchLimit, ...]
    max_batch: int | None
    step_ms_at_max_batch: float | None
    tokens_per_s_per_replica: float | None
    tokens_per_s_per_user: float | None
    sizing: ReplicaPlan | None
    simulated: SimOutcome | None
    simulated_below: SimOutcome | None
    recommended_replicas: int | None
    replicas_method: str | None
    batching: BatchUtilization | None
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)


def plan_from_results(results: Results, request: PlanRequest) -> CapacityPlan:
    """Plan from a measured run or sweep."""
    obs = from_results(results)
    saturation = classify(obs.levels, batch_is_concurrency=obs.batch_source == "concurrency")
    warnings = list(obs.warnings)
    line = saturation.unsaturated
    fit = fit_p95 = None
    usable = [i for i in line if obs.levels[i].tpot_p50_ms is not None and obs.levels[i].tpot_p95_ms is not None]
    if len({obs.levels[i].batch for i in usable}) >= 2:
        xs = [obs.levels[i].batch for i in usable]
        p50 = [v for i in usable if (v := obs.levels[i].tpot_p50_ms) is not None]
        p95 = [v for i in usable if (v := obs.levels[i].tpot_p95_ms) is not None]
        fit = fit_step_model(xs, p50, seed=request.seed)
        fit_p95 = fit_step_model(xs, p95, seed=request.seed)
        warnings += [f"fit: {w}" for w in fit.warnings]
    if fit is None:
        warnings.append(f"only {len(usable)} unsaturated level(s) with TPOT: no step law fitted; sweep more levels")
    warnings += _mix_warnings(obs, line)
    limits = tuple(
        max_batch_under_slo(obs, saturation, slo, _model_for(slo, fit, fit_p95))
        for slo in request.slos if slo.metric is not None
    )
    output_tokens = request.output_tokens or obs.output_tokens_mean
    return _finish("sweep", obs, saturation, fit, fit_p95, limits, request, output_tokens, warnings)


def plan_from_law(model: StepModel, request: PlanRequest) -> CapacityPlan:
    """What-if planning from a stated law (no sweep): the chapter's arithmetic, exactly."""
    limits = tuple(model_limit(model, slo) for slo in request.slos if slo.metric in (Metric.TPOT, Metric.ITL))
    return _finish("law", None, None, model, model, limits, request, request.output_tokens, [])


def _model_for(slo: SloTarget, fit: StepModel | None, fit_p95: StepModel | None) -> StepModel | None:
    if slo.metric != Metric.TPOT or slo.percentile is None:
        return None  # TTFT is queueing, ITL sees prefill stalls: measured answers only
    return fit if slo.percentile <= 50 else fit_p95


def _finish(
    source: str,
    obs: Observations | None,
    saturation: Saturation | None,
    fit: StepModel | None,
    fit_p95: StepModel | None,
    limits: tuple[BatchLimit, ...],
    request: PlanRequest,
    output_tokens: float | None,
    warnings: list[str],
) -> CapacityPlan:
    batches = [lim.batch for lim in limits if lim.batch is not None]
    max_batch: int | None
    if limits:
        max_batch = min(batches) if len(batches) == len(limits) else None
    elif saturation is not None and saturation.max_batch is not None:
        max_batch = int(saturation.max_batch)
    else:
        max_batch = None
    step = float(fit.step_ms(max_batch)) if fit is not None and max_batch else None
    per_replica = float(fit.tokens_per_s(max_batch)) if fit is not None and max_batch else None
    sizing = simulated = below = None
    recommended, method = None, None
    if request.qps and output_tokens and per_replica:
        e2e_s = step * output_tokens / 1000.0 if step else None
        sizing = replicas_for(request.qps, output_tokens, per_replica, max_utilization=request.max_utilization,
                              e2e_s=e2e_s)
        recommended, method = sizing.replicas_at_utilization, f"utilization target {request.max_utilization:g}"
        ttft_slo = next((s for s in request.slos if s.metric == Metric.TTFT), None)
        tpot_slo = next((s for s in request.slos if s.metric == Metric.TPOT), None)
        if request.simulate and ttft_slo is not None and fit is not None and max_batch:
            simulated, below = replicas_by_simulation(
                fit, max_batch, request.qps, max(1, round(output_tokens)), start=sizing.replicas_no_headroom,
                ttft_slo_ms=ttft_slo.limit, tpot_slo_ms=tpot_slo.limit if tpot_slo else None,
                arrival=request.arrival, burstiness=request.burstiness, seed=request.seed,
            )
            recommended = simulated.replicas
            shape = "Poisson" if request.arrival == "poisson" else f"{request.arrival} (burstiness {request.burstiness:g})"
            method = f"simulation ({shape} arrivals, p95 TTFT and TPOT against the SLOs)"
        elif ttft_slo is None:
            warnings.append("no TTFT SLO given: replicas from the utilization target, not checked by simulation")
    current_slo = next((s for s in request.slos if s.metric == Metric.TPOT), None)
    findings = diagnose(
        slo_key=current_slo.key if current_slo else None,
        slo_ms=current_slo.limit if current_slo else None,
        current_batch=request.current_batch,
        step_ms_at_current=float(fit.step_ms(request.current_batch)) if fit and request.current_batch else None,
        max_batch=max_batch,
        current_replicas=request.current_replicas,
        needed_replicas=recommended,
    )
    return CapacityPlan(
        source, obs, saturation, fit, fit_p95, limits, max_batch, step, per_replica,
        1000.0 / step if step else None, sizing, simulated, below, recommended, method,
        batch_utilization(request.lengths) if request.lengths else None, findings, tuple(warnings),
    )


def _mix_warnings(obs: Observations, line: list[int]) -> list[str]:
    out = []
    mix = (f"prompt ~{obs.prompt_tokens_mean:.0f} / output ~{obs.output_tokens_mean:.0f} tokens"
           if obs.prompt_tokens_mean and obs.output_tokens_mean else "the swept prompt/output mix")
    ratios = [obs.levels[i].itl_p95_ms / obs.levels[i].tpot_p50_ms for i in line  # type: ignore[operator]
              if obs.levels[i].concurrency >= 2 and obs.levels[i].itl_p95_ms and obs.levels[i].tpot_p50_ms]
    if ratios and statistics.median(ratios) > PREFILL_ITL_RATIO:
        out.append(f"steps that admit prompts are slower (ITL p95 ~{statistics.median(ratios):.2f}x TPOT): "
                   f"prefill cost is mixed into the slope, which therefore holds only for {mix}")
    else:
        out.append(f"the law is fitted for {mix}; another mix needs another sweep")
    return out


def _model_json(m: StepModel | None, statistic: str) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "statistic": statistic, "base_ms": m.base_ms, "per_seq_ms": m.per_seq_ms,
        "fitted_batch_range": list(m.fitted_batch_range) if m.n_levels else None, "n_levels": m.n_levels,
        "r_squared": m.r_squared, "residual_mad_ms": m.residual_mad_ms,
        "base_ci_ms": list(m.base_ci_ms) if m.base_ci_ms else None,
        "per_seq_ci_ms": list(m.per_seq_ci_ms) if m.per_seq_ci_ms else None,
        "outlier_levels": list(m.outlier_levels), "warnings": list(m.warnings),
    }


def _to_json(p: CapacityPlan) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": p.source,
        "batch_axis": p.observations.batch_source if p.observations else None,
        "max_batch": p.max_batch,
        "step_ms_at_max_batch": p.step_ms_at_max_batch,
        "tokens_per_s_per_replica": p.tokens_per_s_per_replica,
        "tokens_per_s_per_user": p.tokens_per_s_per_user,
        "replicas_no_headroom": p.sizing.replicas_no_headroom if p.sizing else None,
        "replicas": p.recommended_replicas,
        "replicas_method": p.replicas_method,
        "fit": _model_json(p.fit, "tpot_p50" if p.source == "sweep" else "law"),
        "fit_p95": _model_json(p.fit_p95, "tpot_p95" if p.source == "sweep" else "law"),
        "saturation": None,
        "slo": [
            {"key": lim.slo.key, "limit": lim.slo.limit, "measured": lim.measured, "measured_batch": lim.measured_batch,
             "model_batch": lim.model_batch, "batch": lim.batch, "quality": lim.quality,
             "more_requests": lim.more_requests, "note": lim.note}
            for lim in p.limits
        ],
        "sizing": dataclasses.asdict(p.sizing) if p.sizing else None,
        "simulated": dataclasses.asdict(p.simulated) if p.simulated else None,
        "simulated_below": dataclasses.asdict(p.simulated_below) if p.simulated_below else None,
        "batching": dataclasses.asdict(p.batching) if p.batching else None,
        "observations": [dataclasses.asdict(lv) for lv in p.observations.levels] if p.observations else [],
        "diagnosis": [dataclasses.asdict(f) for f in p.findings],
        "warnings": list(p.warnings),
    }
    if p.saturation is not None and p.observations is not None:
        out["saturation"] = {
            "max_batch": p.saturation.max_batch,
            "signals": list(p.saturation.agreed),
            "levels": [{"label": lv.label, "state": s, "signals": list(sig)}
                       for lv, s, sig in zip(p.observations.levels, p.saturation.states, p.saturation.signals)],
        }
    return out
