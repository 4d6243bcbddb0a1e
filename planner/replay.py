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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from loadgen.sim.engine import EngineConfig
from planner.replica_sim import simulate

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


@dataclass(frozen=True, slots=True)
class ReplayCheck:
    """One level of a measured run, replayed through the plan's engine."""

    label: str
    requests: int
    rate_rps: float  # the sends per second the run made
    rows: tuple[ReplayRow, ...]
    verdict: Verdict
    note: str

    def to_json(self) -> dict[str, object]:
        return {
            "level": self.label,
            "requests": self.requests,
            "rate_rps": self.rate_rps,
            "verdict": self.verdict,
            "note": self.note,
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


def replay_check(
    engine: EngineConfig,
    label: str,
    sent_s: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    ttft_ms: np.ndarray,
    e2e_ms: np.ndarray,
) -> ReplayCheck:
    """The measured requests of one level (any order), served again by ``engine`` at the times they were sent."""
    n = len(sent_s)
    order = np.argsort(sent_s, kind="stable")
    sent = np.asarray(sent_s, dtype=np.float64)[order]
    span = float(sent[-1] - sent[0]) if n > 1 else 0.0
    rate = (n - 1) / span if span > 0 else 0.0
    if n < MIN_REQUESTS:
        return ReplayCheck(label, n, rate, (), "too few requests", f"{n} requests: at least {MIN_REQUESTS} to judge")
    served = simulate(
        engine,
        (sent - sent[0]) * 1000.0,
        np.asarray(output_tokens, dtype=np.int64)[order],
        np.asarray(prompt_tokens, dtype=np.float64)[order],
    )
    measured = {
        "ttft": np.asarray(ttft_ms, dtype=np.float64)[order],
        "e2e": np.asarray(e2e_ms, dtype=np.float64)[order],
    }
    simulated = {"ttft": served.ttft_ms, "e2e": served.last_ms - served.arrival_ms}
    rows = []
    for metric, statistic in (("ttft", "p50"), ("ttft", "p95"), ("e2e", "mean"), ("e2e", "p95")):
        rows.append(
            ReplayRow(
                f"{metric}_{statistic}",
                _statistic(measured[metric], statistic),
                _statistic(simulated[metric], statistic),
            )
        )
    fast = [r for r in rows if r.ratio < 1 / TOLERANCE]
    slow = [r for r in rows if r.ratio > TOLERANCE]
    if fast or slow:  # the unsafe side first: a simulation faster than the server under-provisions
        worst = min(fast, key=lambda r: r.ratio) if fast else max(slow, key=lambda r: r.ratio)
        verdict: Verdict = "optimistic" if fast else "pessimistic"
        side, sized = (
            ("faster", "are not the conservative side; size with a lower --max-utilization, or from an open-loop "
             "sweep of this server")
            if fast
            else ("slower", "may be more than needed")
        )  # fmt: skip
        return ReplayCheck(
            label,
            n,
            rate,
            tuple(rows),
            verdict,
            f"the simulation served this load {side} than the server did ({worst.statistic} "
            f"{worst.simulated_ms:,.1f} ms simulated, {worst.measured_ms:,.1f} measured): replica counts sized near "
            f"this rate {sized}",
        )
    return ReplayCheck(
        label, n, rate, tuple(rows), "agrees", f"every statistic within {TOLERANCE:g}x of what the clients measured"
    )


def _statistic(values: np.ndarray, name: str) -> float:
    """``mean`` or a percentile ``pNN`` of ``values``."""
    return float(np.mean(values)) if name == "mean" else float(np.percentile(values, float(name[1:])))
