"""What a calibration's TTFT holds beyond the fitted engine, as a line in the load (pure).

The length model's engine, run closed-loop at each calibration level's mix and concurrency (stepped as
the simulator's driver steps it, ``planner.simulation.closed_loop``), gives the TTFT the engine alone explains:
prefill, and the wait behind the steps already running. What the server measured beyond that is the
residual, per statistic:

- the front end the engine does not see: HTTP, tokenising, and the hop into the engine (vLLM's engine
  core takes a new request in only between steps, so its own queue time leaves out that wait);
- the spread of real steps, which the simulated engine lacks: the residual of TTFT p95 holds it.

Either can grow with the streams in flight. On vLLM's CPU build (8 slots, prompts of 64 and 256
tokens) the residual of TTFT p50 stayed near 10 ms from one client to eight, while that of p95 grew
from 24 ms by 2.5 ms per added client. Measured against the same simulation that predicts, the
residual of each statistic is fitted as
``at_one + per_client * (clients - 1)`` (Theil-Sen, ``planner.laws.stepmodel``) on every calibration
level, and added where a prediction reads that statistic: the predicted levels' TTFT and the sizing
simulation's TTFT/E2E SLOs (at its mean requests in flight). The prompt does not enter: on vLLM the
rest hardly depended on it, and ``prompt_note`` says when a calibration disagrees.

A number acted on is conservative: a negative intercept or slope (the simulation over-predicting) is
taken as zero, never as a discount.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.slo_target import SloTarget
from planner.laws.lengthmodel import prompt_group
from planner.laws.stepmodel import StepModel, fit_step_model

PERCENTILES = (50.0, 95.0)  # the percentiles fitted: a predicted level's TTFT p50 and p95
STATISTICS: tuple[float | None, ...] = (*PERCENTILES, None)  # and the mean (None), which most vendors' tables give
PROMPT_SLOPE_SHARE = 0.25  # the residual's change between prompt lengths, as a share of its level, worth a note
PROMPT_SLOPE_MIN_MS = 3.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ResidualRow:
    """One calibration level's TTFT statistic, measured and as the fitted engine simulates it."""

    label: str  # e.g. "p64.json c=8"
    clients: float  # the level's achieved concurrency
    prompt_tokens: float
    percentile: float | None  # None: the mean
    measured_ms: float
    simulated_ms: float

    @property
    def residual_ms(self) -> float:
        return self.measured_ms - self.simulated_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadTerm:
    """The residual of one TTFT statistic against the clients in flight."""

    percentile: float | None  # None: the mean
    at_one_ms: float  # at one client (an idle engine)
    per_client_ms: float  # per added client (0 when one concurrency was calibrated)
    line: StepModel | None  # the fit (None: one concurrency, the median residual)
    rows: tuple[ResidualRow, ...]

    def added_ms(self, clients: float) -> float:
        """What this statistic adds beyond the engine at ``clients`` in flight: never below zero, never
        falling with the load."""
        return max(self.at_one_ms, 0.0) + max(self.per_client_ms, 0.0) * max(clients - 1.0, 0.0)

    def added_range_ms(self, clients: float) -> tuple[float, float]:
        """``added_ms``'s 95% interval at ``clients``: the line's at one client and its slope, each at its own
        end (the point where one concurrency was calibrated)."""
        line = self.line
        if line is None or line.base_ci_ms is None or line.per_seq_ci_ms is None:
            return self.added_ms(clients), self.added_ms(clients)
        others = max(clients - 1.0, 0.0)
        ends = [max(a, 0.0) + max(b, 0.0) * others for a in line.base_ci_ms for b in line.per_seq_ci_ms]
        return min(min(ends), self.added_ms(clients)), max(max(ends), self.added_ms(clients))

    @property
    def name(self) -> str:
        return "mean" if self.percentile is None else f"p{self.percentile:g}"

    @property
    def text(self) -> str:
        ci = self.line.per_seq_ci_ms if self.line is not None else None
        interval = f" (95% CI {ci[0]:.2f}..{ci[1]:.2f})" if ci is not None and np.isfinite(ci).all() else ""
        c = [row.clients for row in self.rows]
        return (
            f"TTFT {self.name} adds {round(self.at_one_ms, 1) + 0.0:.1f} ms at one client and "
            f"{round(self.per_client_ms, 2) + 0.0:+.2f} ms "
            f"per added client{interval} beyond the fitted engine, from {len(self.rows)} calibration levels at "
            f"concurrency {round(min(c), 1):g}..{round(max(c), 1):g}"
        )


@dataclass(frozen=True, slots=True)
class TtftResidual:
    """The residual of every fitted TTFT statistic."""

    terms: tuple[LoadTerm, ...]

    def term(self, percentile: float | None) -> LoadTerm:
        """The term for a statistic (None: the mean): the mean's own where fitted, else p50's; a percentile
        reads the fitted percentile nearest below it (past the highest, the highest, which understates its
        tail), and where the calibration gave means only, the mean's (``means_only`` says so)."""
        fitted = [t for t in self.terms if t.percentile is not None]
        if percentile is None or not fitted:
            mean = next((t for t in self.terms if t.percentile is None), None)
            if mean is not None:
                return mean
            percentile = 50.0
        below = [t for t in fitted if t.percentile is not None and t.percentile <= percentile]
        return max(below, key=_rank) if below else min(fitted, key=_rank)

    @property
    def means_only(self) -> bool:
        """Whether the calibration measured no TTFT percentile, so every percentile reads the mean's residual."""
        return not any(t.percentile is not None for t in self.terms)

    def added_ms(self, percentile: float | None, clients: float) -> float:
        return self.term(percentile).added_ms(clients)

    @property
    def sizing_note(self) -> str:
        """What a sizing simulation's method says it added: each line as it was used, e.g. ``(p50 5.2 ms +
        0.00/client, p95 14.5 ms + 0.42/client)``."""
        lines = ", ".join(
            f"{t.name} {max(t.at_one_ms, 0.0):.1f} ms + {max(t.per_client_ms, 0.0):.2f}/client" for t in self.terms
        )
        return f"TTFT and E2E plus what the levels measured beyond the engine ({lines})"

    def slo_added_ms(self, slo: SloTarget, clients: float) -> float:
        """What a TTFT or E2E SLO's statistic holds beyond the engine at ``clients`` in flight (the first
        token's delay delays the last)."""
        return self.added_ms(None if slo.mean else slo.percentile, clients)

    @property
    def max_clients(self) -> float:
        return max(row.clients for t in self.terms for row in t.rows)

    def reach_note(self, batch: int) -> str:
        """Whether a plan at ``batch`` reads a growing line past the clients it was measured at ("" when not)."""
        growing = [t for t in self.terms if t.per_client_ms > 0]
        if not growing or batch <= self.max_clients * 1.05:
            return ""
        return (
            f"TTFT beyond the fitted engine was measured at up to {self.max_clients:.0f} clients and grows with them; "
            f"the plan reads its line up to batch {batch} (extrapolated): a calibration level at that concurrency "
            "measures it"
        )

    def prompt_note(self) -> str:
        """Whether the residual changed with the prompt between the calibration's mixes ("" when not): the
        line holds it constant across prompts, so a prediction for a longer prompt would carry the gap."""
        rows = self.term(50.0).rows  # p50's where fitted, else the mean's
        group = prompt_group(row.prompt_tokens for row in rows)
        by_prompt: dict[float, list[float]] = {}  # a prompt length swept again joins its group
        for row in rows:
            by_prompt.setdefault(group[row.prompt_tokens], []).append(row.residual_ms)
        if len(by_prompt) < 2:
            return ""
        medians = [(prompt, float(np.median(v))) for prompt, v in sorted(by_prompt.items())]
        (short, low), (long, high) = medians[0], medians[-1]
        gap = high - low
        if abs(gap) < max(PROMPT_SLOPE_MIN_MS, PROMPT_SLOPE_SHARE * max(abs(low), abs(high))):
            return ""
        return (
            f"TTFT beyond the fitted engine differs with the prompt: median {low:.1f} ms at {short:.0f} prompt tokens, "
            f"{high:.1f} at {long:.0f}; it is taken as the same for every prompt, so a longer prompt's predicted TTFT "
            f"can be {'short' if gap > 0 else 'long'} by about that much again"
        )


def _rank(term: LoadTerm) -> float:
    return -1.0 if term.percentile is None else term.percentile


def fit_ttft_residual(rows: Sequence[ResidualRow]) -> TtftResidual | None:
    """A line in the clients per fitted statistic, over ``rows`` (None: no row)."""
    terms = []
    for q in STATISTICS:
        mine = tuple(row for row in rows if row.percentile == q)
        if not mine:
            continue
        x = np.array([row.clients - 1.0 for row in mine])
        y = np.array([row.residual_ms for row in mine])
        if np.unique(np.round(x, 1)).size < 2:
            terms.append(LoadTerm(percentile=q, at_one_ms=float(np.median(y)), per_client_ms=0.0, line=None, rows=mine))
            continue
        line = fit_step_model(x, y)
        terms.append(
            LoadTerm(percentile=q, at_one_ms=line.base_ms, per_client_ms=line.per_seq_ms, line=line, rows=mine)
        )
    return TtftResidual(tuple(terms)) if terms else None
