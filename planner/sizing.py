"""Replicas for a target load: the chapter's arithmetic, a utilisation target, and a simulation.

1. No headroom: ``ceil(qps * output_tokens / per_replica_tok_s)``: every
   replica at its SLO-limited capacity (the chapter's 6 for 40 QPS x 200).
2. Utilisation target: ``ceil(need / (max_utilization * per_replica_tok_s))``:
   TTFT tails explode well before utilisation 1 (methodology §2.6).
3. Simulation: the same engine as the simulated server, driven in virtual
   time with the fitted law, ``max_num_seqs`` capped at the SLO batch, and
   Poisson or gamma arrivals at ``qps / R`` per replica (random routing);
   the smallest R whose p95 TTFT and TPOT meet the SLOs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadgen.schedule import Arrival, arrival_offsets
from loadgen.sim.engine import Engine, EngineConfig
from planner.exact import exact
from planner.stepmodel import StepModel

SIM_REQUESTS = 3000  # per simulated replica: enough for a stable p95
SIM_WARMUP_FRACTION = 0.1  # the first arrivals see an empty engine: excluded


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    needed_tokens_per_s: float
    per_replica_tokens_per_s: float
    replicas_no_headroom: int
    utilization_no_headroom: float  # of each replica's SLO-limited capacity
    max_utilization: float
    replicas_at_utilization: int
    in_flight_per_replica: float | None  # Little's law at the recommended count: qps/R * e2e


def replicas_for(
    qps: float, output_tokens: float, per_replica_tok_s: float, *, max_utilization: float = 0.8,
    e2e_s: float | None = None,
) -> ReplicaPlan:
    """Replica counts from token throughput.

    Examples
    --------
    >>> p = replicas_for(40, 200, 87 * 1000 / 59.8)
    >>> (p.replicas_no_headroom, p.replicas_at_utilization, round(p.utilization_no_headroom, 4))
    (6, 7, 0.9165)
    """
    if not qps > 0 or not output_tokens > 0 or not per_replica_tok_s > 0:
        raise ValueError("qps, output_tokens and per_replica_tok_s must be > 0")
    if not 0 < max_utilization <= 1:
        raise ValueError(f"max_utilization must be in (0, 1], got {max_utilization}")
    need = qps * output_tokens
    r0 = _ceil_ratio(need, per_replica_tok_s)
    r_util = _ceil_ratio(need, max_utilization * per_replica_tok_s)
    return ReplicaPlan(
        need, per_replica_tok_s, r0, need / (r0 * per_replica_tok_s), max_utilization, r_util,
        qps / r_util * e2e_s if e2e_s is not None else None,
    )


def _ceil_ratio(a: float, b: float) -> int:
    """``ceil(a / b)`` on exact decimals (8000 / 1600 is 5, not 5.000000001)."""
    return max(1, math.ceil(exact(a) / exact(b)))


@dataclass(frozen=True, slots=True)
class SimOutcome:
    replicas: int
    ttft_p95_ms: float
    tpot_p95_ms: float
    passed: bool


def simulate_replica(
    model: StepModel,
    max_num_seqs: int,
    rate: float,
    output_tokens: int,
    *,
    arrival: Arrival = "poisson",
    burstiness: float = 1.0,
    requests: int = SIM_REQUESTS,
    seed: int = 0,
) -> tuple[float, float]:
    """p95 TTFT and p95 TPOT (ms) of one replica fed ``rate`` requests/s, in virtual time."""
    engine = Engine(EngineConfig(base_ms=model.base_ms, per_seq_ms=max(model.per_seq_ms, 0.0),
                                 max_num_seqs=max_num_seqs))
    arrivals = arrival_offsets(rate, requests, arrival=arrival, burstiness=burstiness,
                               rng=np.random.default_rng(seed)) * 1000.0
    first = np.full(requests, np.nan)
    last = np.full(requests, np.nan)
    t, i = 0.0, 0
    while True:
        while i < requests and arrivals[i] <= t:
            engine.submit(i, prompt_tokens=0, max_tokens=output_tokens, now_ms=float(arrivals[i]))
            i += 1
        step = engine.next_step(t)
        if step is None:
            if i >= requests:
                break
            t = float(arrivals[i])
            continue
        t = step.end_ms
        for seq in step.emitted:
            if np.isnan(first[seq]):
                first[seq] = t
            last[seq] = t
    keep = slice(int(requests * SIM_WARMUP_FRACTION), None)
    ttft = (first - arrivals)[keep]
    tpot = ((last - first) / max(output_tokens - 1, 1))[keep]
    return float(np.percentile(ttft, 95)), float(np.percentile(tpot, 95))


def replicas_by_simulation(
    model: StepModel,
    max_num_seqs: int,
    qps: float,
    output_tokens: int,
    *,
    start: int,
    ttft_slo_ms: float,
    tpot_slo_ms: float | None,
    arrival: Arrival = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
    max_replicas: int = 10_000,
) -> tuple[SimOutcome, SimOutcome | None]:
    """The smallest R (searching up from ``start``) that meets the SLOs, and R-1 for contrast."""

    def outcome(r: int) -> SimOutcome:
        ttft, tpot = simulate_replica(model, max_num_seqs, qps / r, output_tokens, arrival=arrival,
                                      burstiness=burstiness, seed=seed)
        ok = ttft <= ttft_slo_ms and (tpot_slo_ms is None or tpot <= tpot_slo_ms)
        return SimOutcome(r, ttft, tpot, ok)

    r = max(1, start)
    found = outcome(r)
    while not found.passed:
        if r >= max_replicas:
            raise ValueError(f"no replica count up to {max_replicas} meets the SLOs in simulation")
        r = r + 1 if r < 8 else math.ceil(r * 1.25)
        found = outcome(r)
    # a geometric jump may overshoot: walk back down to the smallest passing count
    below = outcome(r - 1) if r > 1 else None
    while below is not None and below.passed:
        found, r = below, r - 1
        below = outcome(r - 1) if r > 1 else None
    return found, below
