"""One verdict per level: where it sits on the saturation curve, and whether it can be trusted (pure).

Every command shows these same verdicts (the sweep table and its stop rule,
``plan``, ``report``, ``gate``), so a level is never "saturated" in one
place and "ok" in another, or trusted by one command and not by the next.

Saturation is the planner's multi-signal classification (``planner.evidence.knee``).
Trust problems, each a sentence naming the level:

- client-bound: the numbers measure the load generator;
- interrupted: a partial level;
- errors above the untrusted rate: the latencies describe a biased subset;
- nothing completed in the window, or only a closed loop's first round (not timed);
- too few samples for a percentile asked (``loadgen.quantity.samples_needed``);
- a window shorter than ``WINDOW_LIFETIMES`` mean request lifetimes: counts
  and throughput are quantised by whole requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from loadgen.level import client_health
from loadgen.level.result import WINDOW_LIFETIMES, LevelResult
from loadgen.quantity import PER_REQUEST, Metric, Quantity, samples_needed
from planner.evidence.knee import Saturation, State, classify
from planner.evidence.observations import Observations, observe, queue_growth_s

UNTRUSTED_ERROR_RATE = 0.20


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelVerdict:
    label: str
    state: State
    signals: tuple[str, ...]  # saturation signals that fired at this level
    problems: tuple[str, ...]  # why its numbers cannot be trusted (empty: trusted)
    service: tuple[str, ...] = ()  # those of ``problems`` the service caused (errors, overload): its answer
    window: tuple[str, ...] = ()  # those a longer window would answer (too few samples, a short window)

    @property
    def trusted(self) -> bool:
        return not self.problems

    @property
    def runner_only(self) -> bool:
        """Untrusted only for causes of the measurement (the client, the window), none of the service's:
        measuring again may give an answer (``--retries``)."""
        return bool(self.problems) and not self.service

    @property
    def flags(self) -> tuple[str, ...]:
        """Short words for a table cell: the state when it is not plain, then ``untrusted``."""
        return tuple(
            f for f in (self.state if self.state != "unsaturated" else "", "" if self.trusted else "untrusted") if f
        )


@dataclass(frozen=True, slots=True)
class Verdicts:
    observations: Observations
    saturation: Saturation
    levels: tuple[LevelVerdict, ...]  # in load order, as ``observations.levels``

    def of(self, label: str) -> LevelVerdict:
        return next(v for v in self.levels if v.label == label)

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(p for v in self.levels for p in v.problems)


def judge(
    levels: Sequence[LevelResult],
    asked: Iterable[Quantity] = (),
    *,
    untrusted_error_rate: float = UNTRUSTED_ERROR_RATE,
) -> Verdicts:
    """Verdicts for ``levels``; ``asked``: the percentiles some SLO or check will read."""
    obs = observe(levels)
    saturation = _classified(obs)
    wanted = tuple(dict.fromkeys(q for q in asked if q.percentile is not None and q.metric in PER_REQUEST))
    out = []
    for lv, state, signals in zip(obs.results, saturation.states, saturation.signals):
        found = _trust_findings(lv, wanted, untrusted_error_rate)
        problems = tuple(text for text, _ in found)
        service = tuple(text for text, side in found if side == "service")
        window = tuple(text for text, side in found if side == "window")
        out.append(
            LevelVerdict(
                label=lv.load.label, state=state, signals=signals, problems=problems, service=service, window=window
            )
        )
    return Verdicts(obs, saturation, tuple(out))


def _classified(obs: Observations) -> Saturation:
    """Each series of levels classified on its own: a pooling sweep's batch sizes are separate curves (a
    batch of 16 at 1 client is not the next level after a batch of 1 at 8), the rest one series."""
    by_concurrency = obs.batch_source == "concurrency"
    keys = [lv.load.batch for lv in obs.results]
    if len(set(keys)) <= 1:
        return classify(obs.levels, batch_is_concurrency=by_concurrency)
    states: list[State] = ["unsaturated"] * len(keys)
    signals: list[tuple[str, ...]] = [()] * len(keys)
    agreed: list[str] = []
    for key in dict.fromkeys(keys):
        where = [i for i, k in enumerate(keys) if k == key]
        part = classify(tuple(obs.levels[i] for i in where), batch_is_concurrency=by_concurrency)
        for j, i in enumerate(where):
            states[i], signals[i] = part.states[j], part.signals[j]
        agreed += part.agreed
    return Saturation(states=tuple(states), signals=tuple(signals), max_batch=None, agreed=tuple(dict.fromkeys(agreed)))


def retry_reason(
    level: LevelResult, asked: Iterable[Quantity] = (), *, untrusted_error_rate: float = UNTRUSTED_ERROR_RATE
) -> tuple[str, bool] | None:
    """Why a level should be measured again (``--retries``), and whether with a longer window: only when
    the measurement alone made it untrusted. Errors and overload are the service's answer, never retried."""
    verdict = judge([level], asked, untrusted_error_rate=untrusted_error_rate).levels[0]
    return ("; ".join(verdict.problems), bool(verdict.window)) if verdict.runner_only else None


def trust_problems(level: LevelResult, asked: Sequence[Quantity], untrusted_error_rate: float) -> tuple[str, ...]:
    """Why this level's numbers cannot be trusted, one sentence each (empty: trusted)."""
    return tuple(text for text, _ in _trust_findings(level, asked, untrusted_error_rate))


Side = Literal["client", "window", "service"]


OUTAGE_S = 1.0  # refused connections and no answer this long (or OUTAGE_SHARE of the window, if longer)...
OUTAGE_SHARE = 0.05  # ...untrust a level: the back-off spaces the failures, so the error rate alone misses it


def _trust_findings(
    level: LevelResult, asked: Sequence[Quantity], untrusted_error_rate: float
) -> list[tuple[str, Side]]:
    """Each problem with the side that caused it: the service (errors, an open loop past capacity: that
    is the answer) or the measurement: the client (a busy machine) or the window (too few samples, too
    short, not settled), which measuring again, longer, may answer."""
    label = level.load.label
    out: list[tuple[str, Side]] = []
    if level.client_bound:
        text = (
            f"{label}: client-bound ({'; '.join(level.client_bound_causes)}): its latencies measure the load "
            f"generator; try {client_health.remedy(level)}"
        )
        out.append((text, "client"))
    if level.target_gone:
        text = (
            f"{label}: the server stopped answering (connections refused, nothing answered for the last "
            f"{level.outage_s or 0:.1f} s): the level and the sweep stopped; a partial level"
        )
        out.append((text, "service"))
    elif not level.complete:
        out.append((f"{label}: interrupted; a partial level", "client"))
    elif level.outage_s is not None and level.outage_s >= max(OUTAGE_S, OUTAGE_SHARE * level.window_s):
        text = (
            f"{label}: the server stopped answering for {level.outage_s:.1f} s of the level in all (connections "
            "refused, nothing answered): its numbers are not the server's steady state"
        )
        out.append((text, "service"))
    rate = level.error_rate
    if rate is not None and rate > untrusted_error_rate:
        text = (
            f"{label}: {rate:.0%} of requests failed (above {untrusted_error_rate:.0%}): the latencies "
            "describe a biased subset"
        )
        out.append((text, "service"))
    if level.completed == 0 and level.window_s == 0 and level.complete:  # the budget ran out in the warm-up
        text = f"{label}: every request was spent in the warm-up, so nothing was measured; give more requests or a shorter warm-up"
        out.append((text, "window"))
        return out
    if level.completed == 0:
        out.append((f"{label}: no request completed in the measured window; lengthen the duration", "window"))
        return out
    if not any(level.histograms[m].count for m in (Metric.E2E, Metric.TTFT, Metric.TPOT)):  # a closed loop's
        # first round (untimed) was all that completed
        text = (
            f"{label}: only the clients' first requests (the ramp's round, not timed) completed in the measured "
            "window; lengthen the duration"
        )
        out.append((text, "window"))
        return out
    return out + _sample_findings(level, asked) + _steadiness_findings(level)


def _sample_findings(level: LevelResult, asked: Sequence[Quantity]) -> list[tuple[str, Side]]:
    """Too few independent samples for a percentile asked."""
    out: list[tuple[str, Side]] = []
    for q in asked:
        assert q.percentile is not None
        n, need = level.independent_samples(q.metric), samples_needed(q.percentile)
        if n < need:
            what = "engine steps' worth of ITL samples" if q.metric == Metric.ITL else f"{q.metric.value} samples"
            text = (
                f"{level.load.label}: {n:.0f} {what} cannot bound a p{q.percentile:g} (needs at least "
                f"{need}); run the level longer"
            )
            out.append((text, "window"))
    return out


def _steadiness_findings(level: LevelResult) -> list[tuple[str, Side]]:
    """A queue growing across the window, or a window too short for the requests' lifetimes."""
    label = level.load.label
    out: list[tuple[str, Side]] = []
    e2e_us = level.histograms[Metric.E2E].mean_us()
    short = e2e_us is not None and level.window_s < WINDOW_LIFETIMES * e2e_us / 1e6
    growing = queue_growth_s(level)
    if growing is not None and level.load.kind == "rate":
        offered, served = level.offered_per_s, level.requests_per_s
        rates = f"; {offered:.2f}/s offered, {served:.2f}/s served" if offered and served else ""
        text = (
            f"{label}: not steady (queue growing): TTFT rose {growing:.2f} s across the window{rates}: "
            "the load exceeds capacity and its percentiles depend on the window's length"
        )
        out.append((text, "service"))
    elif growing is not None and not short and not level.client_bound:
        # A closed loop's queue is bounded by its clients: past the batch cap they wait in phase-locked
        # waves, which a window of a few lifetimes averages out; a rise beyond that is the server slowing.
        # Not when the client was starved of its core: its own delay then stretches its clock and its
        # sends alike, and the client-bound finding above already says the level measured the client
        # (a CI run read "the server slowed" from a client that waited 94% of the time it was ready).
        text = (
            f"{label}: not steady: TTFT rose {growing:.2f} s across the window, though a closed loop's queue "
            f"is bounded by its {level.load.value:g} clients: the server slowed as the level ran (or the start "
            "had not settled: lengthen the warm-up)"
        )
        out.append((text, "window"))
    if short:
        assert e2e_us is not None
        text = (
            f"{label}: the measured window ({level.window_s:.1f} s) is shorter than {WINDOW_LIFETIMES:g} "
            f"request lifetimes (E2E mean {e2e_us / 1e6:.1f} s): counts and throughput are quantised"
        )
        out.append((text, "window"))
    return out
