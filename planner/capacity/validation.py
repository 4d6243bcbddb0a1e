"""Does the sizing simulation serve a measured run as the server did? (pure)

A replica count rests on the sizing simulation: the fitted engine serving arrivals in virtual time.
The methodology's last step is to check it on the endpoint with an open-loop run at the planned
per-replica rate. This replays such a run request for request (each one's send time, prompt and
output length, from its ``--records``) through the engine the plan simulates, and sets the simulated
TTFT and E2E beside what the clients measured. Same arrivals on both sides: no draw of a schedule
stands between them, only the model.

On vLLM's CPU build (pinned, tiny model, prompt 256 / answer 64) the replay read TTFT p95 21.8 ms
where the clients measured 21.8 at 40% of the law's capacity, but 107 ms against 246 at 65%: the
server's API process shared the engine's core, a cost per request no step law holds. A plan is
"optimistic" there, and its replica count is not the conservative side.

The same replay corrects the plan, as NVIDIA Dynamo's SLA planner corrects its profiled estimates
online with ``actual/expected`` factors: the step factor that makes the replay's mean decode time
the measured one (every step term scaled alike), then the mean TTFT the engine does not hold (the
API path, tokenising, output lag), never below zero: an engine that queues more than the server did
keeps it (the safe side; a constant subtracted from every TTFT once read a median a third of the
measured one, since the surplus sits in the tail's queue). Both are measured at the planned per-replica rate, on the
endpoint the replicas will be, which no closed-loop sweep is: a plan given ``--validate`` sizes
with them and says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal, Protocol

import numpy as np

from loadgen.engine import EngineConfig
from loadgen.quantity import LAG_THRESHOLD_MS, Metric
from loadgen.slo_target import SloTarget
from planner.capacity.sizing import QUEUEING_METRICS, slo_statistic
from planner.simulation.replica_sim import simulate

FACTOR_RANGE = (0.2, 5.0)  # a step factor outside this is no correction but a wrong plan: the search stops there
FACTOR_PRECISION = 1e-4  # relative: the bisection's last bracket (TTFT's mean moves ~1 ms with a 1e-4 step change)
TOLERANCE = 1.25  # the simulation agrees when every statistic is within this factor of the measured one
MIN_REQUESTS = 50  # fewer: a p95 is a handful of requests, and the check says so rather than judge

Verdict = Literal["agrees", "optimistic", "pessimistic", "too few requests"]


@dataclass(frozen=True, slots=True)
class ReplayRow:
    statistic: str  # ttft_p50, ttft_p95, e2e_mean, e2e_p95
    measured_ms: float
    simulated_ms: float

    @property
    def ratio(self) -> float:
        """Simulated over measured: below 1, the simulation serves the load faster than the server did."""
        return self.simulated_ms / self.measured_ms if self.measured_ms > 0 else float("inf")


@dataclass(frozen=True, slots=True, kw_only=True)
class Correction:
    """How the endpoint served a measured level against the engine the plan simulates.

    ``step_factor``: every step term times this makes the replay's total decode time (first token to
    last, all requests) the measured one. ``ttft_offset_ms``: then, the measured TTFT mean minus the
    simulated one, what the server adds that no step holds.
    """

    step_factor: float
    ttft_offset_ms: float
    requests: int
    rate_rps: float
    # per TTFT/E2E SLO (its key): the measured statistic minus the simulated one, never below the mean offset.
    # A tail the engine does not hold (a stall, a core shared with the API) is added where the SLO reads it.
    slo_offsets_ms: tuple[tuple[str, float], ...] = ()
    # the corrected engine's TTFT mean above the measured one: its queue and prefill read slower than the
    # server's. Not subtracted: a constant taken off every TTFT lands on the tail's queueing, not on the
    # median (a subtraction of 98.9 ms once read a p50 of 46 ms against 143.7 measured), so the plan keeps it
    surplus_ms: float = 0.0

    def added_ms(self, slo: SloTarget, clients: float = 1.0) -> float:
        """What the server adds to ``slo``'s statistic beyond the corrected engine's steps: measured at one
        load, and added at any (``clients``, the requests in flight, is not read)."""
        return dict(self.slo_offsets_ms).get(slo.key, self.ttft_offset_ms)

    def engine(self, engine: EngineConfig) -> EngineConfig:
        """``engine`` with every step term scaled by the factor."""
        return scaled(engine, self.step_factor)

    @property
    def text(self) -> str:
        tails = "".join(f", {key.removesuffix('_ms')} {ms:+.1f} ms" for key, ms in self.slo_offsets_ms)
        surplus = (
            f" (the engine's TTFT mean reads {self.surplus_ms:,.1f} ms above the endpoint's: kept, the safe side)"
            if self.surplus_ms > 0
            else ""
        )
        return (
            f"steps x{self.step_factor:.3g}, TTFT {self.ttft_offset_ms:+.1f} ms{tails}{surplus}, from {self.requests} "
            f"requests at {self.rate_rps:.3g}/s measured on the endpoint"
        )


def scaled(engine: EngineConfig, factor: float) -> EngineConfig:
    """Every term of ``engine``'s step law times ``factor``: the same engine, uniformly slower or faster."""
    return dataclasses.replace(
        engine,
        base_ms=engine.base_ms * factor,
        per_seq_ms=engine.per_seq_ms * factor,
        per_kv_ms=engine.per_kv_ms * factor,
        prefill_ms_per_token=engine.prefill_ms_per_token * factor,
        prefill_attention_ms=engine.prefill_attention_ms * factor,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayCheck:
    """One level of a measured run, replayed through the plan's engine."""

    label: str
    requests: int
    rate_rps: float  # the sends per second the run made
    rows: tuple[ReplayRow, ...]
    verdict: Verdict
    note: str
    correction: Correction | None = None  # None with too few requests
    corrected: tuple[ReplayRow, ...] = ()  # the rows again, replayed with the correction

    def to_json(self) -> dict[str, object]:
        return {
            "level": self.label,
            "requests": self.requests,
            "rate_rps": self.rate_rps,
            "verdict": self.verdict,
            "note": self.note,
            "correction": None if self.correction is None else dataclasses.asdict(self.correction),
            "corrected": [{"statistic": r.statistic, "simulated_ms": r.simulated_ms} for r in self.corrected],
            "rows": [
                {
                    "statistic": r.statistic,
                    "measured_ms": r.measured_ms,
                    "simulated_ms": r.simulated_ms,
                    "ratio": r.ratio,
                }
                for r in self.rows
            ],
        }


class MeasuredRequests(Protocol):
    """One level of an open-loop run's records, as read (``loadgen.inputs.measured.MeasuredLevel`` is one)."""

    @property
    def label(self) -> str: ...
    @property
    def sent_s(self) -> np.ndarray: ...
    @property
    def prompt_tokens(self) -> np.ndarray: ...
    @property
    def output_tokens(self) -> np.ndarray: ...
    @property
    def ttft_ms(self) -> np.ndarray: ...
    @property
    def e2e_ms(self) -> np.ndarray: ...
    @property
    def send_lag_ms(self) -> np.ndarray: ...
    @property
    def skipped(self) -> int: ...


def replay_check(
    engine: EngineConfig,
    label: str,
    sent_s: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    ttft_ms: np.ndarray,
    e2e_ms: np.ndarray,
    *,
    slos: Sequence[SloTarget] = (),
    send_lag_ms: np.ndarray | None = None,
) -> ReplayCheck:
    """The measured requests of one level (any order), served again by ``engine`` at the times they were sent,
    and the correction that makes the engine serve them as the server did (with an offset for each TTFT or
    E2E SLO in ``slos``). ``send_lag_ms``: how late the client sent each request; a run whose p99 is past
    the client-bound rule's limit measured the load generator, and no correction is taken from it."""
    n = len(sent_s)
    order = np.argsort(sent_s, kind="stable")
    sent = np.asarray(sent_s, dtype=np.float64)[order]
    span = float(sent[-1] - sent[0]) if n > 1 else 0.0
    rate = (n - 1) / span if span > 0 else 0.0
    checked = partial(ReplayCheck, label=label, requests=n, rate_rps=rate)
    if n < MIN_REQUESTS:
        return checked(rows=(), verdict="too few requests", note=f"{n} requests: at least {MIN_REQUESTS} to judge")
    replay = _Replay(
        arrival_ms=(sent - sent[0]) * 1000.0,
        output_tokens=np.asarray(output_tokens, dtype=np.int64)[order],
        prompt_tokens=np.asarray(prompt_tokens, dtype=np.float64)[order],
        ttft_ms=np.asarray(ttft_ms, dtype=np.float64)[order],
        e2e_ms=np.asarray(e2e_ms, dtype=np.float64)[order],
    )
    rows = replay.rows(*replay.serve(engine))
    fast, slow = [r for r in rows if r.ratio < 1 / TOLERANCE], [r for r in rows if r.ratio > TOLERANCE]
    if fast or slow:  # the unsafe side first: a simulation faster than the server under-provisions
        worst = min(fast, key=lambda r: r.ratio) if fast else max(slow, key=lambda r: r.ratio)
        verdict: Verdict = "optimistic" if fast else "pessimistic"
        side, sized = (
            ("faster", "are not the conservative side uncorrected; a plan given --qps with --validate sizes with the "
             "correction")
            if fast
            else ("slower", "may be more than needed uncorrected; a plan given --qps with --validate sizes with the "
                  "correction")
        )  # fmt: skip
        note = (
            f"the simulation served this load {side} than the server did ({worst.statistic} "
            f"{worst.simulated_ms:,.1f} ms simulated, {worst.measured_ms:,.1f} measured): replica counts sized near "
            f"this rate {sized}"
        )
    else:
        verdict, note = "agrees", f"every statistic within {TOLERANCE:g}x of what the clients measured"
    lag_p99 = float(np.percentile(send_lag_ms, 99)) if send_lag_ms is not None and len(send_lag_ms) else 0.0
    if lag_p99 > LAG_THRESHOLD_MS:
        note += (
            f"; no correction taken: the client sent late (send lag p99 {lag_p99:,.1f} ms > {LAG_THRESHOLD_MS:g} "
            "ms), so the run measured the load generator as much as the server: validate with a trusted run"
        )
        return checked(rows=tuple(rows), verdict=verdict, note=note)
    correction, (ttft, e2e) = replay.correction(engine, rate, slos)
    corrected = replay.rows(ttft + correction.ttft_offset_ms, e2e + correction.ttft_offset_ms)
    return checked(rows=tuple(rows), verdict=verdict, note=note, correction=correction, corrected=tuple(corrected))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Replay:
    """One level's requests in send order: what was sent (ms from the first send, lengths) and what was measured."""

    arrival_ms: np.ndarray
    output_tokens: np.ndarray
    prompt_tokens: np.ndarray
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray

    def serve(self, engine: EngineConfig) -> tuple[np.ndarray, np.ndarray]:
        """Each request's simulated TTFT and E2E, in send order."""
        served = simulate(engine, self.arrival_ms, self.output_tokens, self.prompt_tokens)
        return served.ttft_ms, served.last_ms - served.arrival_ms

    def rows(self, ttft_ms: np.ndarray, e2e_ms: np.ndarray) -> list[ReplayRow]:
        measured, simulated = {"ttft": self.ttft_ms, "e2e": self.e2e_ms}, {"ttft": ttft_ms, "e2e": e2e_ms}
        return [
            ReplayRow(
                f"{metric}_{statistic}",
                _statistic(measured[metric], statistic),
                _statistic(simulated[metric], statistic),
            )
            for metric, statistic in (("ttft", "p50"), ("ttft", "p95"), ("e2e", "mean"), ("e2e", "p95"))
        ]

    def decode_ms(self, engine: EngineConfig) -> float:
        """The simulated time from first token to last, summed over every request."""
        ttft, e2e = self.serve(engine)
        return float(np.sum(e2e - ttft))

    def correction(
        self, engine: EngineConfig, rate: float, slos: Sequence[SloTarget]
    ) -> tuple[Correction, tuple[np.ndarray, np.ndarray]]:
        """The step factor (bisection: the simulated decode time grows with it) and then the TTFT offsets; with
        each request's TTFT and E2E as the engine at that factor serves them (before any offset)."""
        measured = float(np.sum(self.e2e_ms - self.ttft_ms))
        factor = 1.0
        if measured > 0 and self.decode_ms(engine) > 0:
            low, high = FACTOR_RANGE
            if self.decode_ms(scaled(engine, low)) >= measured:
                factor = low
            elif self.decode_ms(scaled(engine, high)) <= measured:
                factor = high
            else:
                while high - low > FACTOR_PRECISION * low:
                    mid = (low + high) / 2
                    low, high = (mid, high) if self.decode_ms(scaled(engine, mid)) < measured else (low, mid)
                factor = (low + high) / 2
        ttft, e2e = self.serve(scaled(engine, factor))
        # means apart: a step a fraction of a percent longer moves every step boundary against the arrivals,
        # and each request's wait for the step in progress by up to a step; the mean wait stays, a median jumps
        apart_mean = float(np.mean(self.ttft_ms) - np.mean(ttft))
        mean = max(apart_mean, 0.0)  # what the server adds; an engine that queues more keeps its surplus
        offsets = []
        for slo in slos:
            if slo.metric in QUEUEING_METRICS:
                measured_values, simulated = (self.ttft_ms, ttft) if slo.metric == Metric.TTFT else (self.e2e_ms, e2e)
                apart = slo_statistic(measured_values, slo) - slo_statistic(simulated, slo)
                offsets.append((slo.key, max(mean, apart)))
        correction = Correction(
            step_factor=factor,
            ttft_offset_ms=mean,
            requests=len(self.arrival_ms),
            rate_rps=rate,
            slo_offsets_ms=tuple(offsets),
            surplus_ms=max(-apart_mean, 0.0),
        )
        return correction, (ttft, e2e)


def most_conservative(corrections: Iterable[Correction | None]) -> Correction | None:
    """One correction for several measured levels: the slowest steps and the largest TTFT offset any showed."""
    found = [c for c in corrections if c is not None]
    if not found:
        return None
    keys = dict.fromkeys(key for c in found for key, _ in c.slo_offsets_ms)
    return Correction(
        step_factor=max(c.step_factor for c in found),
        ttft_offset_ms=max(c.ttft_offset_ms for c in found),
        requests=sum(c.requests for c in found),
        rate_rps=max(c.rate_rps for c in found),
        slo_offsets_ms=tuple(
            (key, max(dict(c.slo_offsets_ms).get(key, c.ttft_offset_ms) for c in found)) for key in keys
        ),
        surplus_ms=max(c.surplus_ms for c in found),
    )


def _statistic(values: np.ndarray, name: str) -> float:
    """``mean`` or a percentile ``pNN`` of ``values``."""
    return float(np.mean(values)) if name == "mean" else float(np.percentile(values, float(name[1:])))
