"""The capacity plan's data, and its JSON as ``plan --json`` writes it: the schema beside its data (pure).

JSON keys are stable: scripts and dashboards read them. Every number is the plan's own, never recomputed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgen.engine import EngineConfig
from planner.capacity.batch_limit import BatchLimit, model_name
from planner.capacity.diagnose import Finding
from planner.capacity.mix_forecast import MixForecast
from planner.capacity.prefill import Prefill
from planner.capacity.sizing import ReplicaPlan, SimOutcome
from planner.evidence.knee import Saturation
from planner.evidence.observations import Observations
from planner.evidence.verdicts import Verdicts
from planner.laws.batching import BatchUtilization
from planner.laws.stepmodel import StepModel
from planner.laws.ttft_residual import TtftResidual


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPlan:
    """A plan's every answer and how each was obtained; built by name only (``kw_only``)."""

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
    sizing: ReplicaPlan | None = None
    prefill: Prefill | None  # what the steps carry and the simulation used (None: no prefill term, no simulation)
    decode: StepModel | None  # the step without prefill's share, where it differs from ``fit``
    simulated: SimOutcome | None = None
    simulated_below: SimOutcome | None = None
    recommended_replicas: int | None = None
    replicas_method: str | None = None
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
        return plan_json(self)


def model_json(m: StepModel | None, statistic: str) -> dict[str, Any] | None:
    """A fitted (or stated) step law and how sure it is."""
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


def mix_json(f: MixForecast) -> dict[str, Any]:
    """A mix plan's forecast: the length model, the law at the mix, and the server limits it read."""
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
        "law_at_mix": model_json(f.law, "predicted tpot_p50"),
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


def plan_json(p: CapacityPlan) -> dict[str, Any]:
    """The whole plan."""
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
        "fit": model_json(p.fit, p.fit_statistic),
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
                "law": model_json(lim.model, model_name(lim.slo) if p.source == "sweep" else "law"),
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
        "mix": mix_json(p.mix) if p.mix is not None else None,
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
