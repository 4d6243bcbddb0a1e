"""The question a capacity plan answers: SLOs, the target traffic, and how to size for it (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.choices import Arrival
from loadgen.plan_defaults import MAX_UTILIZATION
from loadgen.slo_target import SloTarget
from planner.capacity.sizing import queueing_slos
from planner.capacity.validation import Correction
from planner.laws.lengthsample import LengthSample


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """What the user wants to know."""

    slos: tuple[SloTarget, ...] = ()
    qps: float | None = None
    output_tokens: float | None = None  # per request; default: the sweep's mean
    max_utilization: float = MAX_UTILIZATION
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

    @property
    def residual_read(self) -> bool:
        """Whether the sizing simulation reads a TTFT residual: it judges a TTFT/E2E SLO, and no correction
        measured on the endpoint replaces it."""
        return self.simulate and self.correction is None and bool(queueing_slos(self.slos))
