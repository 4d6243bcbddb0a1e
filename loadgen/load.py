"""Load modes, in one pure module: what a level offers and how its requests arrive.

A level is a closed-loop concurrency (N clients, each sending its next
request when the last one ends) or an open-loop rate (a schedule fixed in
advance, whatever the server does). Open-loop arrivals are drawn (constant,
Poisson, or gamma with shape ``burstiness``: 1 is Poisson, below 1 burstier,
above 1 smoother) or replayed from a trace. Offsets are seconds from the
level's start, sorted and cumulative (an absolute schedule), so sending
never drifts by the time spent sleeping. A level shared among workers is
dealt out here too, so one process, N processes or N Ray actors send the
same schedule. Pure (numpy only): the planner's sizing simulation draws its
arrivals with the same functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from loadgen.choices import Arrival
from loadgen.limits import MAX_EVENT_CHARS
from loadgen.quantity import LAG_THRESHOLD_MS, Metric


def arrival_offsets(
    rate: float,
    n: int,
    *,
    arrival: Arrival = Arrival.POISSON,
    burstiness: float = 1.0,
    rng: np.random.Generator,
) -> np.ndarray:
    """The first ``n`` arrival offsets (s) for ``rate`` requests/s.

    Constant arrivals are exactly ``i / rate``, starting at 0. Random ones
    start with a draw, as a process observed from time 0 would.
    """
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if arrival == Arrival.CONSTANT:
        return np.arange(n, dtype=np.float64) / rate
    if arrival == Arrival.POISSON:
        gaps = rng.exponential(1.0 / rate, size=n)
    elif arrival == Arrival.GAMMA:
        if not burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {burstiness}")
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    else:
        raise ValueError(f"arrival must be constant, poisson or gamma, got {arrival!r}")
    return np.cumsum(gaps)


def offsets_within(
    rate: float,
    duration_s: float,
    *,
    arrival: Arrival = Arrival.POISSON,
    burstiness: float = 1.0,
    rng: np.random.Generator,
) -> np.ndarray:
    """All arrival offsets before ``duration_s``."""
    n = int(rate * duration_s * 1.5) + 16
    while True:
        offsets = arrival_offsets(rate, n, arrival=arrival, burstiness=burstiness, rng=rng)
        if n == 0 or offsets[-1] >= duration_s:
            return offsets[offsets < duration_s]
        n *= 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """One load level: a closed-loop concurrency or an open-loop rate."""

    kind: Literal["concurrency", "rate"]
    value: float
    arrival: Arrival | None = None  # rate only
    burstiness: float | None = None  # rate only: gamma shape (1 = Poisson)
    max_in_flight: int | None = None  # rate only: in-flight cap
    batch: int | None = None  # pooling APIs (embeddings, rerank): inputs per request at this level

    @property
    def label(self) -> str:
        shown = f"c={self.value:g}" if self.kind == "concurrency" else f"r={self.value:g}/s"
        return shown if self.batch is None else f"{shown} b={self.batch}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "value": self.value}
        if self.kind == "rate":
            out.update(arrival=self.arrival, burstiness=self.burstiness, max_in_flight=self.max_in_flight)
        if self.batch is not None:
            out["batch"] = self.batch
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Load:
        kind = raw["kind"]
        if kind not in ("concurrency", "rate"):
            raise ValueError(f"load.kind must be concurrency or rate, got {kind!r}")
        value = float(raw["value"])
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"load.value must be a finite number > 0, got {raw['value']!r}")
        if kind == "concurrency":
            value = int(value)
        arrival = raw.get("arrival")
        batch = raw.get("batch")
        if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
            raise ValueError(f"load.batch must be a whole number >= 1, got {batch!r}")
        return cls(
            kind=kind,
            value=value,
            arrival=None if arrival is None else Arrival(arrival),
            burstiness=raw.get("burstiness"),
            max_in_flight=raw.get("max_in_flight"),
            batch=batch,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelPlan:
    """Everything that shapes one level, besides where it is sent."""

    load: Load
    duration_s: float | None = None  # measured duration after warm-up
    requests: int | None = None  # request budget (warm-up included)
    warmup_s: float = 0.0
    ramp_up_s: float = 0.0  # closed loop: workers start staggered over this span
    drain_s: float = 10.0  # how long in-flight requests may finish after the level stops
    interrupt_grace_s: float = 2.0  # after an interrupt: how long to let in-flight requests finish
    timeout_s: float = 600.0  # per request
    max_event_chars: int = MAX_EVENT_CHARS  # an SSE line or event beyond this fails its request
    request_id_header: str | None = None  # a fresh id per request in this header (None: none sent)
    arrivals_s: tuple[float, ...] | None = None  # open loop: replay these offsets (a trace) instead of drawing
    lag_threshold_ms: float = LAG_THRESHOLD_MS
    seed: int = 0
    goodput_limits_ms: tuple[tuple[Metric, float], ...] = ()  # per-request limits counted as goodput
    min_requests: int | None = None  # request floor: the session lengthens the duration to reach it

    def __post_init__(self) -> None:
        if self.duration_s is None and self.requests is None:
            raise ValueError("a level needs a duration, a request budget, or both")
        if self.load.value <= 0:
            raise ValueError(f"load value must be > 0, got {self.load.value}")

    @property
    def planned_s(self) -> float | None:
        return None if self.duration_s is None else self.warmup_s + self.duration_s


def open_loop_offsets(plan: LevelPlan) -> np.ndarray:
    """An open-loop level's send offsets (s from its start): replayed, or drawn from its seed.

    A pure function of the plan, so a level split across workers or hosts
    can deal one schedule out in interleaved shares (``split_plan``).
    """
    if plan.arrivals_s is not None:  # a trace: its own times (its load's arrival is Arrival.TRACE)
        return np.asarray(plan.arrivals_s[: plan.requests], dtype=np.float64)
    load, rng = plan.load, np.random.default_rng(plan.seed)
    arrival = load.arrival or Arrival.POISSON
    burstiness = load.burstiness or 1.0
    if plan.duration_s is not None:
        span = plan.warmup_s + plan.duration_s
        offsets = offsets_within(load.value, span, arrival=arrival, burstiness=burstiness, rng=rng)
        return offsets if plan.requests is None else offsets[: plan.requests]
    return arrival_offsets(load.value, plan.requests or 0, arrival=arrival, burstiness=burstiness, rng=rng)


def split_plan(plan: LevelPlan, n: int) -> list[LevelPlan]:
    """Share a level among ``n`` workers; each gets a distinct seed (its prompts). Empty shares are dropped.

    Closed loop: the clients and the request budget are divided. Open loop:
    the level's one arrival schedule (``open_loop_offsets``, from the level's
    seed) is dealt out in turn, worker ``i`` taking arrivals ``i, i+n, ...``,
    so the union of the shares is exactly the schedule one process would send.
    """
    load = plan.load
    schedule = open_loop_offsets(plan) if load.kind == "rate" else None
    plans = []
    for i in range(n):
        arrivals = None
        if schedule is None:
            part_load = replace(load, value=_share(int(load.value), n, i))
            requests = _share(plan.requests, n, i) if plan.requests is not None else None
            if part_load.value == 0 or requests == 0:
                continue
        else:
            arrivals = tuple(schedule[i::n].tolist())
            if not arrivals:
                continue
            cap = max(1, _share(load.max_in_flight, n, i)) if load.max_in_flight else None
            part_load = replace(load, value=load.value / n, max_in_flight=cap)
            requests = len(arrivals) if plan.requests is not None else None
        # the request floor was applied to the whole level's duration (session): each worker's window
        # must end at the same instant, so none extends its own
        seed = plan.seed * 1009 + i
        plans.append(
            replace(plan, load=part_load, requests=requests, seed=seed, min_requests=None, arrivals_s=arrivals)
        )
    return plans


def _share(total: int, n: int, i: int) -> int:
    return total // n + (1 if i < total % n else 0)
