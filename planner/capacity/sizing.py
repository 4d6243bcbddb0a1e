"""Replicas for a target load: docs/design.md's arithmetic, a utilisation target, and a simulation.

1. No headroom: ``ceil(qps * output_tokens / per_replica_tok_s)``: every
   replica at its SLO-limited capacity (docs/design.md's 6 for 40 QPS x 200).
2. Utilisation target: ``ceil(need / (max_utilization * per_replica_tok_s))``:
   TTFT tails explode well before utilisation 1 (methodology §2.6).
3. Simulation: the simulated server's law in virtual time
   (``planner.simulation.replica_sim``), ``max_num_seqs`` capped at the SLO batch,
   Poisson or gamma arrivals at ``qps / R`` per replica (random routing).
   Near utilisation 1 a percentile of a few thousand requests is a coin
   flip, so each R is simulated in independent replications (each long,
   its warm-up dropped) until the 95% interval of the SLO's percentile lies
   on one side of the limit; one still straddling it at the cap is
   "unsettled" and counts as failing (the safe side). The smallest R that
   passes is the simulation's answer; R - 1 is shown failing beside it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from loadgen.choices import Arrival
from loadgen.engine import EngineConfig
from loadgen.load import arrival_offsets
from loadgen.plan_defaults import MAX_UTILIZATION
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner.evidence.observations import Z95
from planner.laws.exact import exact
from planner.laws.lengthsample import LengthSample
from planner.laws.stepmodel import context_tokens, prefill_share_ms, prompt_pairs
from planner.simulation.replica_sim import Timeline, simulate

MIN_REQUESTS = 20_000  # measured per replication (more for large batches: see ``replication_size``)
FIRST_REPLICATIONS = 5
MAX_REPLICATIONS = 40
RATE_PRECISION = 0.01  # the rate search stops within 1% of one replica's capacity
RATE_SEARCH_SIZE = (2_000, 10_000)  # (warm-up, measured) requests per replication while searching
RATE_SEARCH_REPLICATIONS = 10
SIMULATED_METRICS = (Metric.TTFT, Metric.TTFO, Metric.TPOT, Metric.E2E)
NO_REPLICA_COUNT = "no replica count meets the SLOs in simulation"
IDLE_UTILIZATION = 0.02  # a replica this lightly loaded that still fails an SLO fails it with no queue at all
QUEUEING_METRICS = (Metric.TTFT, Metric.E2E)  # a queue decides them; the batch cap holds TPOT
# a reasoning model's first visible token: its TTFT's queue plus the reasoning steps (``Traffic.reasoning_share``)
FIRST_OUTPUT = Metric.TTFO
SIZED_QUEUEING = (*QUEUEING_METRICS, FIRST_OUTPUT)  # what the sizing simulation judges under a queue


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaPlan:
    needed_tokens_per_s: float
    per_replica_tokens_per_s: float
    replicas_no_headroom: int
    utilization_no_headroom: float  # of each replica's SLO-limited capacity
    max_utilization: float
    replicas_at_utilization: int
    in_flight_per_replica: float | None  # Little's law at the recommended count: qps/R * e2e
    qps: float  # the load asked for: the decision states it beside the count
    output_tokens: float


def replicas_for(
    qps: float,
    output_tokens: float,
    per_replica_tok_s: float | Fraction,
    *,
    max_utilization: float = MAX_UTILIZATION,
    e2e_s: float | None = None,
) -> ReplicaPlan:
    """Replica counts from token throughput, on exact decimals.

    Every input is read as the decimal it prints as (a ``Fraction`` is taken
    as it is: pass ``StepModel.tokens_per_s_exact``), so 46.4 QPS x 200
    tokens over 0.58 x 1600 tok/s is exactly 10 replicas, not the 11 that
    ``0.58 * 1600 = 927.9999999999999`` gives in binary floats.

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
    need = exact(qps) * exact(output_tokens)
    per_replica = per_replica_tok_s if isinstance(per_replica_tok_s, Fraction) else exact(per_replica_tok_s)
    r0 = max(1, math.ceil(need / per_replica))
    r_util = max(1, math.ceil(need / (exact(max_utilization) * per_replica)))
    return ReplicaPlan(
        needed_tokens_per_s=float(need),
        per_replica_tokens_per_s=float(per_replica),
        replicas_no_headroom=r0,
        utilization_no_headroom=float(need / (r0 * per_replica)),
        max_utilization=max_utilization,
        replicas_at_utilization=r_util,
        in_flight_per_replica=qps / r_util * e2e_s if e2e_s is not None else None,
        qps=qps,
        output_tokens=output_tokens,
    )


Verdict = Literal["pass", "fail", "unsettled", "unstable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """A simulated percentile: the mean over replications of each one's percentile, with a 95% t-interval."""

    key: str  # the SLO it answers, e.g. ttft_p95_ms
    value_ms: float
    low_ms: float
    high_ms: float
    limit_ms: float

    @property
    def verdict(self) -> Verdict:
        if self.high_ms <= self.limit_ms:
            return "pass"
        return "fail" if self.low_ms > self.limit_ms else "unsettled"


@dataclass(frozen=True, slots=True, kw_only=True)
class SimOutcome:
    """One replica count, simulated until its verdict was settled (or the replication cap)."""

    replicas: int
    utilization: float  # arrival rate per replica over its capacity at the batch cap
    verdict: Verdict
    estimates: tuple[Estimate, ...]
    replications: int
    requests: int  # simulated requests, warm-ups included

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def estimate(self, metric: Metric) -> Estimate | None:
        return next((e for e in self.estimates if e.key.startswith(f"{metric.value}_p")), None)


def capacity_rps(
    law: EngineConfig, output_tokens: float, prompt_tokens: float = 0.0, context: float | None = None
) -> float:
    """Requests/s one replica completes with every slot busy: the utilisation's denominator.

    Each slot's prompt is prefilled once in its ``output_tokens`` steps, so a full step also
    carries ``prefill * prompt * slots / output``, and reads each slot's prompt and half its
    answer of KV (the one step law of docs/design.md); ``context``: KV tokens per sequence-step
    where lengths vary (``LengthSample.mix``).
    """
    slots = law.max_num_seqs
    kv = context_tokens(prompt_tokens, output_tokens) if context is None else context
    per_slot = (
        law.per_seq_ms
        + law.per_kv_ms * kv / 1000.0
        + prefill_share_ms(law.prefill_ms_per_token, prompt_tokens, output_tokens)
        + law.prefill_attention_ms * prompt_pairs(prompt_tokens) / 1e6 / output_tokens
    )
    return slots * 1000.0 / ((law.base_ms + per_slot * slots) * output_tokens)


def load_capacity_rps(
    law: EngineConfig, output_tokens: float, prompt_tokens: float = 0.0, lengths: LengthSample | None = None
) -> float:
    """``capacity_rps`` for fixed lengths, or for a sample's lengths as the steps see them (its ``mix``)."""
    if lengths is None:
        return capacity_rps(law, output_tokens, prompt_tokens)
    mix = lengths.mix
    return capacity_rps(law, mix.output_tokens, mix.prompt_tokens, mix.context_tokens)


def queueing_slos(slos: Iterable[SloTarget], *, first_output: bool = False) -> tuple[SloTarget, ...]:
    """The SLOs a queue decides (TTFT, E2E; with ``first_output``, for the sizing simulation, which models the
    reasoning before an answer, the time to first output token too; a fleet's replay does not): judged at a
    load, never capping the batch."""
    metrics = SIZED_QUEUEING if first_output else QUEUEING_METRICS
    return tuple(s for s in slos if s.metric in metrics)


def as_ttft(slo: SloTarget) -> SloTarget:
    """A first-output SLO read as the TTFT one of its statistic: what the server adds before the first token
    (an endpoint's correction, a calibration's residual) delays the first visible one alike."""
    return dataclasses.replace(slo, metric=Metric.TTFT) if slo.metric == FIRST_OUTPUT else slo


def replication_size(law: EngineConfig) -> tuple[int, int]:
    """(warm-up, measured) requests per replication: long against the batch, whose turnover sets the memory."""
    measured = max(MIN_REQUESTS, 250 * law.max_num_seqs)
    return measured // 5, measured


@dataclass(frozen=True, slots=True, kw_only=True)
class Traffic:
    """What the simulated requests ask and how they arrive, besides the rate: one value every search of the
    sizing simulation is handed (replicas for a QPS, the largest rate one replica holds)."""

    output_tokens: int
    prompt_tokens: float = 0.0
    lengths: LengthSample | None = None  # each request's prompt and output drawn from this sample (else the above)
    arrival: Arrival = Arrival.POISSON
    burstiness: float = 1.0
    seed: int = 0
    # what the server adds to an SLO's statistic beyond the engine's steps at the replication's mean requests
    # in flight (Little's law), as an endpoint's validation measured it (``Correction.added_ms``) or a mix
    # plan's calibration (``TtftResidual``)
    added_ms: Callable[[SloTarget, float], float] | None = None
    reasoning_share: float = 0.0  # of each answer's tokens, the reasoning before its first visible one

    def capacity_rps(self, law: EngineConfig) -> float:
        """Requests/s one replica of ``law`` completes with a full batch of these requests."""
        return load_capacity_rps(law, self.output_tokens, self.prompt_tokens, self.lengths)


def simulate_replicas(
    law: EngineConfig,
    replicas: int,
    qps: float,
    slos: tuple[SloTarget, ...],
    traffic: Traffic,
    *,
    max_replications: int = MAX_REPLICATIONS,
    size: tuple[int, int] | None = None,
) -> SimOutcome:
    """Simulate ``replicas`` replicas fed ``qps`` of ``traffic`` until each SLO's percentile is settled
    against its limit."""
    checked = tuple(s for s in slos if s.metric in SIMULATED_METRICS and (s.percentile is not None or s.mean))
    rate = qps / replicas
    utilization = rate / traffic.capacity_rps(law)
    if utilization >= 1:
        return SimOutcome(
            replicas=replicas, utilization=utilization, verdict="unstable", estimates=(), replications=0, requests=0
        )
    warmup, measured = size or replication_size(law)
    samples: list[list[float]] = [[] for _ in checked]
    estimates: tuple[Estimate, ...] = ()
    verdict: Verdict = "unsettled"
    k = 0
    while k < max_replications:
        rng = np.random.default_rng(np.random.SeedSequence([traffic.seed, replicas, k]))
        n = warmup + measured
        offsets = arrival_offsets(rate, n, arrival=traffic.arrival, burstiness=traffic.burstiness, rng=rng)
        lengths = traffic.lengths
        prompts, outputs = (traffic.prompt_tokens, traffic.output_tokens) if lengths is None else lengths.draw(n, rng)
        timeline = simulate(law, offsets * 1000.0, outputs, prompts)
        in_flight = rate * float(np.mean((timeline.last_ms - timeline.arrival_ms)[warmup:])) / 1000.0  # Little
        added_ms = traffic.added_ms
        for values, slo in zip(samples, checked):
            queued = slo.metric in SIZED_QUEUEING
            added = added_ms(as_ttft(slo), in_flight) if added_ms is not None and queued else 0.0
            values.append(_percentile(timeline, slo, warmup, traffic.reasoning_share) + added)
        k += 1
        if k < FIRST_REPLICATIONS:
            continue
        estimates = tuple(_estimate(slo, values) for slo, values in zip(checked, samples))
        verdict = _combined([e.verdict for e in estimates])
        if verdict != "unsettled":
            break
    return SimOutcome(
        replicas=replicas,
        utilization=utilization,
        verdict=verdict,
        estimates=estimates,
        replications=k,
        requests=k * (warmup + measured),
    )


def _percentile(timeline: Timeline, slo: SloTarget, warmup: int, reasoning_share: float) -> float:
    assert slo.metric is not None
    if slo.metric == FIRST_OUTPUT:
        return slo_statistic(timeline.ttfo_ms(reasoning_share)[warmup:], slo)
    values = {
        Metric.TTFT: timeline.ttft_ms,
        Metric.TPOT: timeline.tpot_ms,
        Metric.E2E: timeline.last_ms - timeline.arrival_ms,
    }[slo.metric][warmup:]
    return slo_statistic(values, slo)


def slo_statistic(values: np.ndarray, slo: SloTarget) -> float:
    """The SLO's statistic (its percentile, or the mean) of simulated latencies; NaN (no value) where none is."""
    values = values[~np.isnan(values)]
    if not len(values):
        return math.nan
    return float(np.mean(values)) if slo.percentile is None else float(np.percentile(values, slo.percentile))


def _estimate(slo: SloTarget, values: list[float]) -> Estimate:
    v = np.asarray(values)
    mean = float(v.mean())
    half = t975(len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return Estimate(
        key=slo.key, value_ms=mean, low_ms=max(0.0, mean - half), high_ms=mean + half, limit_ms=slo.limit
    )  # a latency is never negative


def _combined(verdicts: list[Verdict]) -> Verdict:
    if "fail" in verdicts:
        return "fail"
    return "pass" if all(v == "pass" for v in verdicts) else "unsettled"


_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t975(df: int) -> float:
    """Student's t 97.5% quantile (a table to 10 degrees of freedom, then the Cornish-Fisher expansion)."""
    if df < 1:
        raise ValueError("a t-interval needs at least 2 replications")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def replicas_by_simulation(
    law: EngineConfig,
    qps: float,
    slos: tuple[SloTarget, ...],
    traffic: Traffic,
    *,
    start: int,
    max_replicas: int = 10_000,
    size: tuple[int, int] | None = None,
) -> tuple[SimOutcome, SimOutcome | None]:
    """The smallest R (searching up from ``start``) whose SLO percentiles settle below their limits, and R-1."""

    def outcome(r: int) -> SimOutcome:
        return simulate_replicas(law, r, qps, slos, traffic, size=size)

    r = max(1, start)
    tried = {r: outcome(r)}
    while not tried[r].passed:
        if tried[r].verdict == "fail" and tried[r].utilization < IDLE_UTILIZATION:
            missed = ", ".join(
                f"{e.key} {e.value_ms:,.1f} ms > {e.limit_ms:g}" for e in tried[r].estimates if e.verdict == "fail"
            )
            raise NoReplicaCount(
                f"{NO_REPLICA_COUNT}: a replica at utilization "
                f"{tried[r].utilization:.2g} still reads {missed} (the limit is below what one request takes alone)"
            )
        if r >= max_replicas:
            raise NoReplicaCount(f"{NO_REPLICA_COUNT} (none up to {max_replicas})")
        r = r + 1 if r < 16 else math.ceil(r * 1.25)
        tried[r] = outcome(r)
    # a geometric jump may overshoot: walk back down to the smallest passing count
    while r > 1:
        below = tried.get(r - 1) or outcome(r - 1)
        tried[r - 1] = below
        if not below.passed:
            return tried[r], below
        r -= 1
    return tried[r], None


class NoReplicaCount(ValueError):
    """No number of replicas meets the SLOs: a latency limit below what a request takes at an idle replica."""


def max_rate_per_replica(engine: EngineConfig, slos: Sequence[SloTarget], traffic: Traffic) -> tuple[float | None, str]:
    """The largest arrival rate one replica of ``engine`` serves with every TTFT/E2E SLO settled below its
    limit (bisection on the simulation; an unsettled rate counts as failing), and how it was found:
    mu_slo, the per-replica rate a fleet is sized with."""
    judged = queueing_slos(slos, first_output=True)
    if not judged:
        return None, "no TTFT or E2E SLO given: the largest request rate is not simulated"
    capacity = traffic.capacity_rps(engine)

    def holds(fraction: float) -> bool:
        rate = fraction * capacity
        return simulate_replicas(
            engine, 1, rate, judged, traffic, max_replications=RATE_SEARCH_REPLICATIONS, size=RATE_SEARCH_SIZE
        ).passed

    if not holds(RATE_PRECISION):
        return None, f"even {RATE_PRECISION * capacity:.3g} requests/s breaks {', '.join(s.key for s in judged)}"
    low, high = RATE_PRECISION, 1.0
    while high - low > RATE_PRECISION:
        mid = (low + high) / 2
        low, high = (mid, high) if holds(mid) else (low, mid)
    drawn = f", lengths drawn from {traffic.lengths.source}" if traffic.lengths is not None else ""
    return low * capacity, (
        f"simulated ({traffic.arrival} arrivals, batch capped at {engine.max_num_seqs}{drawn}): {low:.0%} of the "
        f"{capacity:.3g} requests/s a full batch completes"
    )
