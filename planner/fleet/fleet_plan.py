"""A capacity plan for a fleet: demand that changes over time, several ways to serve, and their cost (pure).

Each variant is one way to serve the model (GPU type, tensor parallelism, a quantised build, a
``--max-num-seqs``), with its own plan (``planner.capacity.plan``: the largest batch under the SLOs) and
price. Its capacity under the SLOs, mu (requests/s one replica holds), is the smaller of the
utilisation target's rate (target x tokens/s at the plan's batch / output tokens: the rule
``plan --qps`` sizes by) and, where a TTFT or E2E SLO is given, the largest rate the sizing
simulation settles under it (``planner.capacity.sizing.max_rate_per_replica``).

Then, per bucket k of the demand:

1. a perfect autoscaler serves ``need_k = ceil(lambda_k / mu)`` replicas, the lower bound
   llm-d's autoscaling work names (on exact decimals, as ``replicas_for``);
2. the replay (``planner.fleet.fleet_replay``) serves the actual arrivals on that fleet; a bucket
   whose requests break an SLO gets one more replica, until every bucket holds;
3. a replica asked for at t serves from t + ``scale_up_s``: with L = ceil(scale_up_s / bucket)
   buckets of lag, the fleet pays for ``max(need[k..k+L])`` in bucket k (a replica needed in
   bucket j is started L buckets before it, and one still needed within L buckets is kept), and
   only replicas up for L buckets serve;
4. ``spare`` replicas (N+1 style) are paid for in every bucket and never counted on.

The choice is the cheapest fleet over the period (USD where every variant has a price, else
GPU-hours), with the runner-up and the margin; a static fleet (the peak all the time) is shown
beside each. With ``mix``, every pair of variants is also tried, requests routed in proportion to
capacity, with the counts of each kind that cost least once the lag and the spares are paid
(``pair_allocations``), so that a pair never costs more than either kind alone.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from loadgen.choices import Arrival
from loadgen.plan_defaults import MAX_UTILIZATION
from loadgen.slo_target import SloTarget
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.sizing import Traffic, max_rate_per_replica, queueing_slos
from planner.fleet.demand import ONE_HOUR_S, Demand
from planner.fleet.fleet_replay import Arrivals, BucketCheck, ReplicaKind, arrivals_for, replay
from planner.laws.exact import exact

MAX_REPLAY_ROUNDS = 30  # each round adds a replica to every failing bucket


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """One way to serve the model: its plan under the SLOs, the lengths it was planned for, and its price."""

    name: str
    plan: CapacityPlan  # planned with the fleet's SLOs and no QPS
    output_tokens: float
    prompt_tokens: float
    source: str  # the results file (or table) it was planned from
    cost_per_gpu_hour: float | None = None
    gpus: int = 1


@dataclass(frozen=True, slots=True)
class VariantCapacity:
    """One replica's capacity under every SLO (mu_slo), or why no size of this variant meets them."""

    variant: Variant
    mu_rps: Fraction | None  # None: no batch or rate meets the SLOs
    how: str

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def batch(self) -> int | None:
        return self.variant.plan.max_batch

    @property
    def hourly(self) -> float:
        """What one replica-hour costs in the objective's unit (USD, or GPU-hours where unpriced)."""
        v = self.variant
        return v.gpus * (v.cost_per_gpu_hour if v.cost_per_gpu_hour is not None else 1.0)


def variant_capacity(
    variant: Variant,
    slos: Sequence[SloTarget],
    *,
    max_utilization: float = MAX_UTILIZATION,
    arrival: Arrival = Arrival.POISSON,
    burstiness: float = 1.0,
    seed: int = 0,
) -> VariantCapacity:
    """mu_slo: the utilisation target's rate, and the simulated largest rate under the TTFT/E2E SLOs; the smaller.

    The simulation runs the variant's engine and adds to each TTFT/E2E statistic what its sweep measured
    beyond that engine (``CapacityPlan.ttft_residual``), as ``plan --qps`` sizes the same sweep."""
    plan = variant.plan
    if plan.max_batch is None or plan.fit is None:
        why = next((lim.note for lim in plan.limits if lim.batch is None and lim.note), None)
        return VariantCapacity(variant, None, f"no batch meets the SLOs: {why or 'no step law was fitted'}")
    tokens = plan.fit.tokens_per_s_exact(plan.max_batch)
    by_utilization = exact(max_utilization) * tokens / exact(variant.output_tokens)
    how = (
        f"utilization target {max_utilization:g} x {float(tokens):,.0f} tok/s at batch {plan.max_batch} / "
        f"{variant.output_tokens:g} output tokens = {float(by_utilization):.3g} requests/s"
    )
    judged = queueing_slos(slos)
    if not judged:
        return VariantCapacity(variant, by_utilization, how)
    if plan.engine is None:
        return VariantCapacity(variant, None, "no engine to simulate the TTFT/E2E SLOs with (no step law fitted)")
    residual = plan.ttft_residual
    rate, simulated = max_rate_per_replica(
        plan.engine,
        judged,
        Traffic(
            output_tokens=max(1, round(variant.output_tokens)),
            prompt_tokens=variant.prompt_tokens,
            arrival=arrival,
            burstiness=burstiness,
            seed=seed,
            added_ms=residual.slo_added_ms if residual is not None else None,
        ),
    )
    if rate is None:
        return VariantCapacity(variant, None, f"no request rate meets the SLOs: {simulated}")
    if residual is not None:
        simulated = f"{simulated}; {residual.sizing_note}"
    if exact(rate) < by_utilization:
        return VariantCapacity(variant, exact(rate), f"{rate:.3g} requests/s {simulated}; below the {how}")
    return VariantCapacity(variant, by_utilization, f"{how}; the simulation holds {rate:.3g} ({simulated})")


@dataclass(frozen=True, slots=True, kw_only=True)
class Fleet:
    """One fleet over the demand's buckets: replicas per kind per bucket, what they cost, and the replay."""

    kinds: tuple[VariantCapacity, ...]  # one variant, or two for a mix
    lower_bound: tuple[tuple[int, ...], ...]  # per kind: ceil(lambda / mu) (a mix: the cheapest combination)
    need: tuple[tuple[int, ...], ...]  # per kind: replicas serving, after the replay's additions
    provisioned: tuple[tuple[int, ...], ...]  # per kind: paid for, with the scale-up lag and the spares
    checks: tuple[BucketCheck, ...]  # the replay of ``need`` (with the lag's serving counts)
    rounds: int  # replay rounds it took
    objective: float  # USD (or GPU-hours) over the period
    gpu_hours: float
    static_objective: float  # the peak's replicas all the time
    static_gpu_hours: float
    lag_objective: float  # what the scale-up lag adds
    spare_objective: float  # what the spares add

    @property
    def name(self) -> str:
        return " + ".join(k.name for k in self.kinds)

    @property
    def held(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def added(self) -> int:
        """Replica-buckets the replay added to the lower bound."""
        return int(np.sum(np.asarray(self.need)) - np.sum(np.asarray(self.lower_bound)))

    def replicas(self) -> tuple[int, ...]:
        """Replicas paid for per bucket, all kinds together."""
        return tuple(int(v) for v in np.asarray(self.provisioned).sum(axis=0))


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetPlan:
    demand: Demand
    slos: tuple[SloTarget, ...]
    capacities: tuple[VariantCapacity, ...]
    fleets: tuple[Fleet, ...]  # cheapest first: the choice, then the runner-up
    scale_up_s: float
    spare: int
    max_utilization: float
    arrivals: str  # what the replay served
    single_kind_pairs: tuple[str, ...] = ()  # pairs tried (``mix``) that cost least as one of their kinds alone

    @property
    def objective(self) -> str:
        """What the fleets are compared on: USD where every variant has a price (``check_prices``), else GPU-hours."""
        return "USD" if self.capacities and self.capacities[0].variant.cost_per_gpu_hour is not None else "GPU-hours"

    @property
    def chosen(self) -> Fleet | None:
        return self.fleets[0] if self.fleets else None

    @property
    def runner_up(self) -> Fleet | None:
        return self.fleets[1] if len(self.fleets) > 1 else None

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)


def lag_buckets(scale_up_s: float, bucket_s: float) -> int:
    """Buckets a new replica takes to serve (a lag of exactly one bucket is one)."""
    return max(0, math.ceil(scale_up_s / bucket_s - 1e-9))


def provision(need: np.ndarray, lag: int) -> tuple[np.ndarray, np.ndarray]:
    """(paid for, serving) per bucket for a perfect autoscaler with ``lag`` buckets of start-up.

    Paid in k: ``max(need[k..k+lag])``. Serving in k: the replicas paid for in every one of
    buckets ``k-lag..k`` (up long enough), which is never below ``need[k]``.
    """
    n = need.shape[-1]
    paid = np.stack([need[..., k : k + lag + 1].max(axis=-1) for k in range(n)], axis=-1)
    serving = np.stack([paid[..., max(0, k - lag) : k + 1].min(axis=-1) for k in range(n)], axis=-1)
    return paid, serving


def check_prices(costs: Sequence[float | None]) -> None:
    """Variants are compared on one scale: USD where every one has a price, GPU-hours where none has."""
    if len({c is None for c in costs}) > 1:
        raise ValueError("give a cost for every variant or for none (they are compared on one scale)")


def plan_fleet(
    demand: Demand,
    capacities: Sequence[VariantCapacity],
    slos: Sequence[SloTarget],
    *,
    scale_up_s: float = 0.0,
    spare: int = 0,
    mix: bool = False,
    max_utilization: float = MAX_UTILIZATION,
    seed: int = 0,
) -> FleetPlan:
    """Every variant's fleet over ``demand`` (and every pair's, with ``mix``), cheapest first."""
    check_prices([c.variant.cost_per_gpu_hour for c in capacities])
    judged = queueing_slos(slos)
    arrivals = arrivals_for(demand, seed)
    feasible = [c for c in capacities if c.mu_rps is not None]
    groups: list[tuple[VariantCapacity, ...]] = [(c,) for c in feasible]
    if mix:
        groups += list(itertools.combinations(feasible, 2))
    fleets = [_fleet(demand, group, judged, arrivals, scale_up_s, spare) for group in groups]
    # a pair that costs least run as one of its kinds alone is that kind's fleet again: not listed twice
    single = tuple(f.name for f in fleets if len(f.kinds) > 1 and not all(any(row) for row in f.need))
    fleets = [f for f in fleets if f.name not in single]
    fleets.sort(key=lambda f: (not f.held, f.objective, len(f.kinds)))
    return FleetPlan(
        demand=demand,
        slos=tuple(slos),
        capacities=tuple(capacities),
        fleets=tuple(fleets),
        scale_up_s=scale_up_s,
        spare=spare,
        max_utilization=max_utilization,
        arrivals=arrivals.source,
        single_kind_pairs=single,
    )


STEADY_MARGIN = 0.05  # a mix that switches kinds on and off must save more than this over a steadier one


def lower_bound(
    demand: Demand, kinds: Sequence[VariantCapacity], *, scale_up_s: float = 0.0, spare: int = 0
) -> np.ndarray:
    """ceil(lambda / mu) per bucket (one kind), or for two kinds the counts covering lambda whose fleet
    costs least once paid for (``pair_allocations``: the scale-up lag and the spares counted)."""
    mus = [c.mu_rps for c in kinds if c.mu_rps is not None]
    if len(mus) != len(kinds):
        raise ValueError("a fleet is planned only of variants that meet the SLOs")
    rates = [exact(r) for r in demand.rates]
    if len(kinds) == 1:
        return np.asarray([[math.ceil(r / mus[0]) for r in rates]], dtype=np.int64)
    lag, hourly = lag_buckets(scale_up_s, demand.bucket_s), np.asarray([c.hourly for c in kinds])
    mu = [float(m) for m in mus]
    costed = [
        (float((with_spares(provision(need, lag)[0], mu, spare).sum(axis=1) * hourly).sum()), need)
        for need in pair_allocations(rates, kinds)
    ]
    cheapest = min(cost for cost, _ in costed)
    # a kind switched on and off from bucket to bucket to save a few percent is an operator's churn, not a plan
    near = [
        (switches(need), cost, i) for i, (cost, need) in enumerate(costed) if cost <= cheapest * (1 + STEADY_MARGIN)
    ]
    return costed[min(near)[2]][1]


def switches(need: np.ndarray) -> int:
    """How often a kind starts or stops running from one bucket to the next."""
    running = need > 0
    return int(np.count_nonzero(running[:, 1:] != running[:, :-1]))


def pair_allocations(rates: Sequence[Fraction], kinds: Sequence[VariantCapacity]) -> list[np.ndarray]:
    """The ways two kinds may cover each bucket's rate, to be costed whole.

    The cheapest counts in each bucket alone switch kinds from bucket to bucket, and a switch pays both
    kinds through the scale-up lag (and a spare of each): once a mix cost 1.5x its cheaper kind alone.
    So the bucket-by-bucket cheapest is one way; a base of one kind with the peaks on the other (each
    order) are two more; each kind alone, two more, so that a pair never costs more than either of its
    kinds would.
    """
    a, b = kinds
    mu_a, mu_b = a.mu_rps, b.mu_rps
    assert mu_a is not None and mu_b is not None
    greedy = np.zeros((2, len(rates)), dtype=np.int64)
    for k, r in enumerate(rates):
        options = (
            (n_a * a.hourly + n_b * b.hourly, n_a + n_b, n_a, n_b)
            for n_a in range(math.ceil(r / mu_a) + 1)
            for n_b in (max(0, math.ceil((r - n_a * mu_a) / mu_b)),)
        )
        _, _, greedy[0, k], greedy[1, k] = min(options)
    base_a = [math.floor(r / mu_a) for r in rates]
    base_b = [math.floor(r / mu_b) for r in rates]
    return [
        greedy,
        np.asarray([base_a, [max(0, math.ceil((r - n * mu_a) / mu_b)) for r, n in zip(rates, base_a)]]),
        np.asarray([[max(0, math.ceil((r - n * mu_b) / mu_a)) for r, n in zip(rates, base_b)], base_b]),
        np.asarray([[math.ceil(r / mu_a) for r in rates], [0] * len(rates)]),
        np.asarray([[0] * len(rates), [math.ceil(r / mu_b) for r in rates]]),
    ]


def with_spares(paid: np.ndarray, mu: Sequence[float], spare: int) -> np.ndarray:
    """``paid`` plus ``spare`` replicas in each bucket, of the largest kind serving there: the loss an N+1
    fleet must survive is its largest replica in use (a kind not running in a bucket needs no spare)."""
    out = paid.copy()
    for k in range(paid.shape[1]):
        running = [i for i in range(paid.shape[0]) if paid[i, k] > 0] or [int(np.argmax(mu))]
        out[max(running, key=lambda i: mu[i]), k] += spare
    return out


def _fleet(
    demand: Demand,
    kinds: tuple[VariantCapacity, ...],
    slos: tuple[SloTarget, ...],
    arrivals: Arrivals,
    scale_up_s: float,
    spare: int,
) -> Fleet:
    base = lower_bound(demand, kinds, scale_up_s=scale_up_s, spare=spare)
    need = base.copy()
    lag = lag_buckets(scale_up_s, demand.bucket_s)
    replica_kinds = [_replica_kind(c) for c in kinds]
    # a failing bucket gets a replica of the kind whose capacity costs least
    cheapest = min(range(len(kinds)), key=lambda i: kinds[i].hourly / float(kinds[i].mu_rps or 1))
    rounds = 0
    checks: tuple[BucketCheck, ...] = ()
    while True:
        _, serving = provision(need, lag)
        checks = replay(arrivals, replica_kinds, serving, slos, len(demand.rates))
        rounds += 1
        failing = [k for k, c in enumerate(checks) if not c.passed]
        if not failing or rounds >= MAX_REPLAY_ROUNDS:
            break
        need[cheapest, failing] += 1
    paid, _ = provision(need, lag)
    with_spare = with_spares(paid, [float(c.mu_rps or 0) for c in kinds], spare)
    hours = demand.bucket_s / ONE_HOUR_S
    hourly = np.asarray([c.hourly for c in kinds])
    gpus = np.asarray([c.variant.gpus for c in kinds])

    def total(per_kind: np.ndarray, weights: np.ndarray) -> float:
        return float((per_kind.sum(axis=1) * weights).sum() * hours)

    static = with_spare.max(axis=1, keepdims=True) * np.ones_like(with_spare)
    return Fleet(
        kinds=tuple(kinds),
        lower_bound=_tuples(base),
        need=_tuples(need),
        provisioned=_tuples(with_spare),
        checks=checks,
        rounds=rounds,
        objective=total(with_spare, hourly),
        gpu_hours=total(with_spare, gpus),
        static_objective=total(static, hourly),
        static_gpu_hours=total(static, gpus),
        lag_objective=total(paid, hourly) - total(need, hourly),
        spare_objective=total(with_spare, hourly) - total(paid, hourly),
    )


def _replica_kind(c: VariantCapacity) -> ReplicaKind:
    engine = c.variant.plan.engine
    if engine is None:
        raise ValueError(f"variant {c.name}: no engine to replay the fleet with")
    residual = c.variant.plan.ttft_residual
    return ReplicaKind(
        engine=engine,
        mu_rps=float(c.mu_rps or 0),
        output_tokens=max(1, round(c.variant.output_tokens)),
        prompt_tokens=c.variant.prompt_tokens,
        added_ms=residual.slo_added_ms if residual is not None else None,
    )


def _tuples(a: np.ndarray) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(v) for v in row) for row in a)


def _fleet_json(p: FleetPlan, f: Fleet) -> dict[str, Any]:
    """One fleet of the plan: its replicas per bucket (lower bound, serving, paid), cost and replay."""
    replayed = queueing_slos(p.slos)  # what each bucket's check holds a value for
    return {
        "variants": [k.name for k in f.kinds],
        "held": f.held,
        p.objective: f.objective,
        "gpu_hours": f.gpu_hours,
        f"static_{p.objective}": f.static_objective,
        "static_gpu_hours": f.static_gpu_hours,
        f"scale_up_lag_{p.objective}": f.lag_objective,
        f"spare_{p.objective}": f.spare_objective,
        "peak_replicas": max(f.replicas()),
        "mean_replicas": float(np.mean(f.replicas())),
        "replicas_lower_bound": {k.name: list(row) for k, row in zip(f.kinds, f.lower_bound)},
        "replicas_serving": {k.name: list(row) for k, row in zip(f.kinds, f.need)},
        "replicas_paid": {k.name: list(row) for k, row in zip(f.kinds, f.provisioned)},
        "replay_rounds": f.rounds,
        "replay_added_replica_buckets": f.added,
        "replay": [
            {"requests": c.requests, "passed": c.passed, **dict(zip((s.key for s in replayed), c.values_ms))}
            for c in f.checks
        ],
    }


def _to_json(p: FleetPlan) -> dict[str, Any]:
    """The fleet plan as ``plan --variant --json`` writes it."""
    chosen, runner = p.chosen, p.runner_up
    return {
        "demand": {
            "source": p.demand.source,
            "bucket_s": p.demand.bucket_s,
            "rates_rps": list(p.demand.rates),
            "peak_rps": p.demand.peak_rps,
            "mean_rps": p.demand.mean_rps,
            "period_s": p.demand.period_s,
        },
        "slo": [{"key": s.key, "limit": s.limit} for s in p.slos],
        "objective": p.objective,
        "scale_up_s": p.scale_up_s,
        "spare": p.spare,
        "max_utilization": p.max_utilization,
        "replay_arrivals": p.arrivals,
        "variants": [
            {
                "name": c.name,
                "source": c.variant.source,
                "cost_per_gpu_hour": c.variant.cost_per_gpu_hour,
                "gpus": c.variant.gpus,
                "batch": c.batch,
                "mu_slo_rps": float(c.mu_rps) if c.mu_rps is not None else None,
                "mu_method": c.how,
            }
            for c in p.capacities
        ],
        "fleets": [_fleet_json(p, f) for f in p.fleets],
        "choice": chosen.name if chosen is not None and chosen.held else None,
        "runner_up": runner.name if runner is not None else None,
        "margin": (runner.objective - chosen.objective) / chosen.objective
        if chosen is not None and runner is not None and chosen.objective
        else None,
    }
