"""The fleet plan replayed: each request of the demand served by the replica it was routed to (pure).

Sizing each bucket by its mean rate misses what happens inside it: a ramp's last minutes run
above the bucket's mean, and a queue built in one bucket is still there in the next. So the plan
is replayed on the arrivals themselves (a trace's own, or Poisson arrivals at each bucket's rate),
each routed at random to one of the replicas serving at its arrival, in proportion to each
replica's capacity (one kind: uniformly), and each replica runs the replica simulation of its
variant (``planner.simulation.replica_sim``) on the requests it got. A replica that leaves the fleet
finishes what it holds. Each bucket is judged on the requests that arrived in it.

One routing draw per request is kept across replays, so adding a replica changes only which
replica the requests of that bucket go to: the plan's correction converges, and "one replica
fewer fails" is a statement about the same requests.

A demand whose Poisson arrivals would number more than ``MAX_REPLAYED`` (30,000 requests/s for an
hour is 10^8) is replayed on a sample of the fleet instead: up to ``per_kind`` replicas of each kind,
each given its own arrivals (a Poisson stream at its share of each bucket's rate: routing at random
in proportion to capacity splits a Poisson process into independent ones, so a replica's arrivals
are the same in distribution), and each bucket judged on the sampled replicas' requests. Memory and
time then grow with the buckets and a replica's own load, not the fleet's; the source says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.engine import EngineConfig
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner.capacity.sizing import slo_statistic
from planner.fleet.demand import Demand
from planner.simulation.replica_sim import simulate


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaKind:
    """What a replica of one variant serves: its engine, capacity share and request lengths."""

    engine: EngineConfig
    mu_rps: float  # routing weight: requests/s one replica holds under the SLOs
    output_tokens: int
    prompt_tokens: float
    # what the server adds to a TTFT/E2E SLO's statistic beyond the engine at some requests in flight
    # (``TtftResidual.slo_added_ms``); None: nothing was measured beyond it
    added_ms: Callable[[SloTarget, float], float] | None = None


@dataclass(frozen=True, slots=True)
class BucketCheck:
    requests: int  # arrivals in the bucket
    values_ms: tuple[float, ...]  # per SLO, the statistic over the bucket's requests (NaN: none arrived)
    passed: bool


MAX_REPLAYED = 2_000_000  # arrivals one replay serves at most: past it, a sample of the fleet's replicas


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrivals:
    """The requests a replay serves, each with its bucket and its routing draw; or, for a demand too large
    to replay whole (``sampled``), what each sampled replica's own arrivals are drawn from."""

    times_s: np.ndarray
    bucket: np.ndarray
    draw: np.ndarray  # uniform [0, 1): where the request lands among the capacity serving its bucket
    source: str
    bucket_s: float
    rates: np.ndarray | None = None  # sampled: each bucket's rate (requests/s)
    seed: int = 0
    most: int = MAX_REPLAYED  # sampled: the arrivals the sampled replicas are drawn to hold at most


def arrivals_for(demand: Demand, seed: int, most: int = MAX_REPLAYED) -> Arrivals:
    """The trace's own arrivals, or a Poisson process at each bucket's rate (seeded); a Poisson demand past
    ``most`` arrivals is drawn replica by replica at replay time, on a sample of the fleet (``replay``)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xF1EE7]))
    n = len(demand.rates)
    expected = float(np.sum(demand.rates)) * demand.bucket_s
    if demand.arrivals_s is None and expected > most:
        empty = np.zeros(0)
        source = (
            f"Poisson arrivals at each bucket's rate, on a sample of the fleet: {expected:,.0f} arrivals are more "
            f"than the {most:,} a replay serves, so each sampled replica draws its own (seed {seed})"
        )
        rates = np.asarray(demand.rates)
        return Arrivals(
            times_s=empty,
            bucket=empty.astype(np.int64),
            draw=empty,
            source=source,
            bucket_s=demand.bucket_s,
            rates=rates,
            seed=seed,
            most=most,
        )
    if demand.arrivals_s is not None:
        times = np.asarray(demand.arrivals_s, dtype=np.float64)
        source = "the trace's own arrivals"
    else:
        counts = rng.poisson(np.asarray(demand.rates) * demand.bucket_s)
        starts = np.repeat(np.arange(n) * demand.bucket_s, counts)
        times = np.sort(starts + rng.random(len(starts)) * demand.bucket_s)
        source = f"Poisson arrivals at each bucket's rate (seed {seed})"
    bucket = np.minimum(np.floor(times / demand.bucket_s).astype(np.int64), n - 1)
    return Arrivals(times_s=times, bucket=bucket, draw=rng.random(len(times)), source=source, bucket_s=demand.bucket_s)


def replay(
    arrivals: Arrivals,
    kinds: Sequence[ReplicaKind],
    serving: np.ndarray,
    slos: Sequence[SloTarget],
    n_buckets: int,
) -> tuple[BucketCheck, ...]:
    """Serve ``arrivals`` on ``serving[kind, bucket]`` replicas of each kind; judge each bucket on ``slos``
    (none: the buckets' requests are counted, nothing is served)."""
    if arrivals.rates is not None:
        return _sampled_replay(arrivals, kinds, serving, slos)
    edges = np.searchsorted(arrivals.bucket, np.arange(n_buckets + 1))  # arrivals are in time order
    if not slos:
        return tuple(BucketCheck(int(edges[b + 1] - edges[b]), (), True) for b in range(n_buckets))
    mu = np.asarray([k.mu_rps for k in kinds], dtype=np.float64)
    capacity = serving * mu[:, None]  # kinds x buckets
    if np.any(capacity.sum(axis=0)[np.unique(arrivals.bucket)] <= 0):
        raise ValueError("a bucket with arrivals has no replica serving")
    cumulative = np.cumsum(capacity, axis=0)
    at = arrivals.draw * cumulative[-1, arrivals.bucket]
    kind = (at[None, :] >= cumulative[:, arrivals.bucket]).sum(axis=0)
    before = np.where(kind > 0, cumulative[np.maximum(kind - 1, 0), arrivals.bucket], 0.0)
    replica = np.minimum(np.floor((at - before) / mu[kind]), serving[kind, arrivals.bucket] - 1).astype(np.int64)
    ttft = np.full(len(at), np.nan)
    e2e = np.full(len(at), np.nan)
    added = np.zeros((len(slos), len(at)))  # per SLO, what each request's kind adds beyond its engine
    key = kind * (int(serving.max()) + 1) + replica
    order = np.argsort(key, kind="stable")  # arrivals are sorted: each replica's requests stay in time order
    groups = np.split(order, np.flatnonzero(np.diff(key[order])) + 1) if len(order) else []
    for idx in groups:
        k = kinds[int(kind[idx[0]])]
        timeline = simulate(k.engine, arrivals.times_s[idx] * 1000.0, k.output_tokens, k.prompt_tokens)
        ttft[idx] = timeline.ttft_ms
        e2e[idx] = timeline.last_ms - timeline.arrival_ms
        if k.added_ms is not None:
            _add_beyond_engine(added, idx, arrivals, e2e[idx], slos, k.added_ms)
    by_metric: dict[Metric | None, np.ndarray] = {Metric.TTFT: ttft, Metric.E2E: e2e}
    judged = [by_metric[s.metric] + added[i] for i, s in enumerate(slos)]
    return _judge(edges, judged, slos, [int(edges[b + 1] - edges[b]) for b in range(n_buckets)])


def _judge(
    edges: np.ndarray, judged: Sequence[np.ndarray], slos: Sequence[SloTarget], requests: Sequence[int]
) -> tuple[BucketCheck, ...]:
    """Each bucket's statistic per SLO over its requests (``judged[i][edges[b]:edges[b + 1]]``), and its verdict."""
    checks = []
    for b, count in enumerate(requests):
        cut = slice(edges[b], edges[b + 1])
        values = tuple(slo_statistic(v[cut], s) for v, s in zip(judged, slos))
        passed = all(math.isnan(v) or v <= s.limit for v, s in zip(values, slos))
        checks.append(BucketCheck(count, values, passed))
    return tuple(checks)


def _add_beyond_engine(
    added: np.ndarray,
    idx: np.ndarray,
    arrivals: Arrivals,
    e2e_ms: np.ndarray,
    slos: Sequence[SloTarget],
    added_ms: Callable[[SloTarget, float], float],
) -> None:
    """Fill ``added[:, idx]`` for one replica's requests: its kind's addition to each SLO's statistic at the
    requests it held at once in each bucket (Little's law on the bucket's arrivals, as ``simulate_replicas``
    reads it per replication). Added per request, so a bucket whose requests mix kinds holds each kind's own."""
    buckets = arrivals.bucket[idx]
    in_flight = np.bincount(buckets, weights=e2e_ms / 1000.0) / arrivals.bucket_s
    for b in np.unique(buckets):
        mine = idx[buckets == b]
        for i, slo in enumerate(slos):
            added[i, mine] = added_ms(slo, float(in_flight[b]))


def _sampled_replay(
    arrivals: Arrivals, kinds: Sequence[ReplicaKind], serving: np.ndarray, slos: Sequence[SloTarget]
) -> tuple[BucketCheck, ...]:
    """The replay on a sample of the fleet: replicas ``0 .. per_kind - 1`` of each kind, each served its own
    Poisson arrivals at its share of every bucket it serves in, the buckets judged on their requests."""
    assert arrivals.rates is not None
    rates, width, n_buckets = arrivals.rates, arrivals.bucket_s, serving.shape[1]
    offered = [round(r * width) for r in rates.tolist()]
    if not slos:
        return tuple(BucketCheck(n, (), True) for n in offered)
    mu = np.asarray([k.mu_rps for k in kinds], dtype=np.float64)
    capacity = (serving * mu[:, None]).sum(axis=0)
    if np.any((capacity <= 0) & (rates > 0)):
        raise ValueError("a bucket with arrivals has no replica serving")
    share = np.divide(rates, capacity, out=np.zeros_like(rates), where=capacity > 0)  # per unit of capacity
    values: list[list[np.ndarray]] = [[] for _ in slos]  # per SLO: the sampled requests' values per replica
    buckets: list[np.ndarray] = []
    for k, kind in enumerate(kinds):
        per_replica = share * kind.mu_rps  # requests/s one replica of this kind gets in each bucket
        load = float(np.sum(per_replica * width * (serving[k] > 0)))
        per_kind = max(1, min(int(serving[k].max()), int(arrivals.most / max(len(kinds) * load, 1.0))))
        for r in range(per_kind):
            active = serving[k] > r
            rng = np.random.default_rng(np.random.SeedSequence([arrivals.seed, 0x5A3B1E, k, r]))
            counts = np.where(active, rng.poisson(per_replica * width), 0)
            bucket = np.repeat(np.arange(n_buckets), counts)
            if not len(bucket):
                continue
            times = np.sort(bucket * width + rng.random(len(bucket)) * width)
            bucket = np.minimum((times // width).astype(np.int64), n_buckets - 1)
            timeline = simulate(kind.engine, times * 1000.0, kind.output_tokens, kind.prompt_tokens)
            e2e = timeline.last_ms - timeline.arrival_ms
            by_metric: dict[Metric | None, np.ndarray] = {Metric.TTFT: timeline.ttft_ms, Metric.E2E: e2e}
            in_flight = np.bincount(bucket, weights=e2e / 1000.0, minlength=n_buckets) / width
            held = np.unique(bucket)
            for i, slo in enumerate(slos):
                added = np.zeros(n_buckets)  # what the server adds beyond the engine, at each bucket's in-flight
                if kind.added_ms is not None:
                    added[held] = [kind.added_ms(slo, float(in_flight[b])) for b in held]
                values[i].append(by_metric[slo.metric] + added[bucket])
            buckets.append(bucket)
    order = np.concatenate(buckets) if buckets else np.zeros(0, dtype=np.int64)
    judged = [np.concatenate(v) if v else np.zeros(0) for v in values]
    sort = np.argsort(order, kind="stable")
    order, judged = order[sort], [v[sort] for v in judged]
    return _judge(np.searchsorted(order, np.arange(n_buckets + 1)), judged, slos, offered)
