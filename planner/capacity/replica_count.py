"""How many replicas a plan recommends for its QPS: the utilisation rule and the sizing simulation (pure).

The larger of the two wins. With a correction measured on the endpoint (``plan --validate``) both run its
slower (or faster) steps, and a TTFT or E2E limit leaves room for the TTFT the engine does not hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from loadgen.engine import EngineConfig
from loadgen.quantity import Metric
from planner.capacity.prefill import Prefill
from planner.capacity.request import PlanRequest
from planner.capacity.sizing import (
    NoReplicaCount,
    ReplicaPlan,
    SimOutcome,
    Traffic,
    queueing_slos,
    replicas_by_simulation,
    replicas_for,
)
from planner.laws.lengthsample import LengthSample
from planner.laws.stepmodel import StepModel
from planner.laws.ttft_residual import TtftResidual
from planner.simulation.closed_loop import run_closed_loop


@dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """What one replica serves at the plan's batch: the law, the engine the simulation runs, and the terms."""

    fit: StepModel  # the mean step with prefill's share in it
    engine: EngineConfig | None  # the sizing simulation's engine (None: no simulation)
    max_batch: int
    output_tokens: float
    step_ms: float | None  # the law's step at max_batch
    prefill: Prefill
    residual: TtftResidual | None  # TTFT beyond the engine, where the evidence measured it
    tokens_per_s: Fraction  # one replica's output at max_batch (``served_tokens_per_s``)
    reasoning_share: float = 0.0  # of each answer's tokens, the reasoning before its first visible one


def served_tokens_per_s(
    fit: StepModel,
    engine: EngineConfig | None,
    batch: int,
    lengths: LengthSample | None,
    measured: float | None = None,
) -> Fraction:
    """One replica's output tokens a second at ``batch``: the law's ``batch`` tokens a step, or less where
    prefill costs time.

    A slot emits nothing while its request waits and prefills, so where the engine prefills at a cost the
    replica serves its clients' Little's-law rate, read off a closed loop of ``batch`` clients on that engine
    at the plan's lengths (on vLLM, prompt 1,024 / output 64, the per-step count read 21% high); the
    smaller of the two is taken. A law alone, or no lengths to run it at, keeps its exact decimals
    (``StepModel.tokens_per_s_exact``).
    ``measured``: what the sweep's own levels served at this batch and these lengths, which no model
    second-guesses (``measured_tokens_per_s``).
    """
    if measured is not None:
        return Fraction(measured)
    per_step = fit.tokens_per_s_exact(batch)
    if engine is None or lengths is None or (engine.prefill_ms_per_token <= 0 and engine.prefill_attention_ms <= 0):
        return per_step
    loop = run_closed_loop(engine.capped(batch), batch, lengths)
    return min(per_step, Fraction(loop.tokens_per_s()))


def measured_tokens_per_s(points: Sequence[tuple[float, float]], batch: int) -> float | None:
    """Output tokens a second the sweep's levels served at ``batch``: interpolated between the (batch, tok/s)
    levels around it; None outside them."""
    ordered = sorted(points)
    if not ordered or not ordered[0][0] <= batch <= ordered[-1][0]:
        return None
    return float(np.interp(batch, [b for b, _ in ordered], [t for _, t in ordered]))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaCount:
    """The count recommended and how it was obtained."""

    sizing: ReplicaPlan  # the utilisation rule's counts
    simulated: SimOutcome | None  # the smallest count the simulation passed
    below: SimOutcome | None  # the count below it, which failed
    recommended: int | None  # None: no count meets the SLOs (said in the warnings)
    method: str

    def plan_fields(self) -> dict[str, Any]:
        """The ``CapacityPlan`` fields this count fills."""
        return {
            "sizing": self.sizing,
            "simulated": self.simulated,
            "simulated_below": self.below,
            "recommended_replicas": self.recommended,
            "replicas_method": self.method,
        }


def count_replicas(served: Served, request: PlanRequest, warnings: list[str]) -> ReplicaCount:
    """Replicas for ``request.qps``: the utilisation rule, and a simulation when an SLO it can judge is given;
    the method names the endpoint's correction, or the TTFT residual the simulation added."""
    count = _count(served, request, warnings)
    if request.correction is not None:
        return dataclasses.replace(
            count, method=f"{count.method}; corrected by the endpoint ({request.correction.text})"
        )
    if served.residual is not None and count.simulated is not None:
        return dataclasses.replace(count, method=f"{count.method}; {served.residual.sizing_note}")
    return count


def _count(served: Served, request: PlanRequest, warnings: list[str]) -> ReplicaCount:
    """The larger of the utilisation rule's count and the simulation's."""
    assert request.qps is not None
    judged = queueing_slos(request.slos, first_output=True)
    if request.correction is not None:
        served = _corrected(served, request, warnings)
    e2e_s = served.step_ms * served.output_tokens / 1000.0 if served.step_ms else None
    sizing = replicas_for(
        request.qps,
        served.output_tokens,
        served.tokens_per_s,
        max_utilization=request.max_utilization,
        e2e_s=e2e_s,
    )
    rule = f"utilization target {request.max_utilization:g}"
    if not request.simulate or not judged or served.engine is None:
        if not judged:
            warnings.append("no TTFT or E2E SLO given: replicas from the utilization target, not checked by simulation")
        return ReplicaCount(
            sizing=sizing, simulated=None, below=None, recommended=sizing.replicas_at_utilization, method=rule
        )
    law = served.engine.capped(served.max_batch)
    beyond = served.residual.slo_added_ms if served.residual is not None else None
    traffic = Traffic(
        output_tokens=max(1, round(served.output_tokens)),
        prompt_tokens=served.prefill.prompt_tokens,
        lengths=request.length_sample,
        arrival=request.arrival,
        burstiness=request.burstiness,
        seed=request.seed,
        added_ms=request.correction.added_ms if request.correction is not None else beyond,
        reasoning_share=served.reasoning_share,
    )
    try:
        simulated, below = replicas_by_simulation(
            law,
            request.qps,
            judged,
            traffic,
            start=sizing.replicas_no_headroom,
        )
    except NoReplicaCount as exc:  # no count to act on: saying the utilization rule's would promise the SLO
        warnings.append(str(exc))
        return ReplicaCount(sizing=sizing, simulated=None, below=None, recommended=None, method=f"none: {exc}")
    sim = _simulation_text(law, served, request)
    if simulated.replicas > sizing.replicas_at_utilization:
        method = f"{sim}; above the {rule}'s {sizing.replicas_at_utilization}"
        return ReplicaCount(
            sizing=sizing, simulated=simulated, below=below, recommended=simulated.replicas, method=method
        )
    method = f"{rule}; the {sim} needs {simulated.replicas}"
    return ReplicaCount(
        sizing=sizing, simulated=simulated, below=below, recommended=sizing.replicas_at_utilization, method=method
    )


def _corrected(served: Served, request: PlanRequest, warnings: list[str]) -> Served:
    """The law, engine and step as the endpoint served them (the correction's step factor), and a warning
    where the batch sized on the sweep's law breaks a TPOT SLO there."""
    assert request.correction is not None
    factor = request.correction.step_factor
    fit = dataclasses.replace(
        served.fit, base_ms=served.fit.base_ms * factor, per_seq_ms=served.fit.per_seq_ms * factor
    )
    engine = request.correction.engine(served.engine) if served.engine is not None else None
    step = served.step_ms * factor if served.step_ms else None
    for slo in request.slos:
        if slo.metric == Metric.TPOT and step and step > slo.limit:
            warnings.append(
                f"the endpoint's steps ran x{factor:.3g} the sweep's law: at batch {served.max_batch} a step takes "
                f"{step:.1f} ms there, over {slo.key} {slo.limit:g}: the batch was sized on the sweep's law; "
                "re-sweep the server as it runs now, or validate at a smaller --max-num-seqs"
            )
    per_step = served.tokens_per_s == served.fit.tokens_per_s_exact(served.max_batch)  # kept on exact decimals
    tokens = fit.tokens_per_s_exact(served.max_batch) if per_step else served.tokens_per_s / Fraction(factor)
    return dataclasses.replace(served, fit=fit, engine=engine, step_ms=step, tokens_per_s=tokens)


def _simulation_text(law: EngineConfig, served: Served, request: PlanRequest) -> str:
    """How the simulation ran: the arrivals, the batch cap, and every term of its engine."""
    shape = "Poisson" if request.arrival == "poisson" else f"{request.arrival} (burstiness {request.burstiness:g})"
    prefill = served.prefill
    term = (
        f"prefill {prefill.ms_per_token:.3g} ms/token x {prefill.prompt_tokens:.0f} prompt tokens: {prefill.source}"
        if prefill.ms_per_token > 0
        else f"prefill {prefill.source}"
    )
    if law.per_kv_ms > 0:
        term += f", KV reads {law.per_kv_ms:.3g} ms per 1k tokens"
    if law.prefill_attention_ms > 0:
        term += f", prefill attention {law.prefill_attention_ms:.3g} ms per 1M token pairs"
    if law.max_num_batched_tokens is not None:
        term += f", {law.max_num_batched_tokens} tokens a step (chunked prefill)"
    if law.kv_capacity_tokens is not None:
        term += f", a KV cache of {law.kv_capacity_tokens:,} tokens"
    if request.length_sample is not None:
        term += f", lengths drawn from {request.length_sample.source}"
    return f"simulation ({shape} arrivals, batch capped at {served.max_batch}, {term})"
