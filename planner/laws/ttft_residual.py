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
``at_one + per_client * (clients - 1)`` on every calibration level (through the levels at one client
where there are some, else Theil-Sen, ``planner.laws.stepmodel``), and added where a prediction reads that statistic: the predicted levels' TTFT and the sizing
simulation's TTFT/E2E SLOs (at its mean requests in flight). Where the calibration's prompts prefill
at lengths apart, the growth per client is fitted in proportion to each prompt's prefill alone (the
queue a real engine keeps beyond the simulated one is of prompts to prefill) and read at the asked
prompt in proportion (``TtftResidual.at_prompt``); ``prompt_note`` says what that leaves.

A number acted on is conservative: a negative intercept or slope (the simulation over-predicting) is
taken as zero, never as a discount.
"""

from __future__ import annotations

import dataclasses
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
PREFILL_APART = 1.5  # the calibration's prompts prefill this far apart: the growth is fitted in proportion
ALONE_CLIENTS = 1.05  # a level's achieved concurrency up to this: one client, an idle engine


@dataclass(frozen=True, slots=True, kw_only=True)
class ResidualRow:
    """One calibration level's TTFT statistic, measured and as the fitted engine simulates it."""

    label: str  # e.g. "p64.json c=8"
    clients: float  # the level's achieved concurrency
    prompt_tokens: float
    percentile: float | None  # None: the mean
    measured_ms: float
    simulated_ms: float
    prefill_ms: float | None = None  # the engine's TTFT for the level's prompt at one client (None: not scaled)

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
    # the growth per client is for a prompt the engine prefills in this many ms alone, and in proportion to it
    # for others (None: the same for every prompt: one prompt length calibrated, or no prefill known)
    reference_ms: float | None = None

    def scaled(self, prefill_ms: float) -> LoadTerm:
        """This term for a prompt the engine prefills in ``prefill_ms`` alone: its growth per client in
        proportion (the same term where it was not fitted in proportion)."""
        if self.reference_ms is None or self.reference_ms <= 0:
            return self
        k = prefill_ms / self.reference_ms
        line = self.line
        if line is not None:
            ci = line.per_seq_ci_ms
            line = dataclasses.replace(
                line, per_seq_ms=line.per_seq_ms * k, per_seq_ci_ms=None if ci is None else (ci[0] * k, ci[1] * k)
            )
        return dataclasses.replace(self, per_client_ms=self.per_client_ms * k, line=line, reference_ms=prefill_ms)

    def unexplained_ms(self, row: ResidualRow) -> float:
        """What this term leaves of a row's residual (its own growth read at the row's prompt)."""
        term = self.scaled(row.prefill_ms) if row.prefill_ms is not None else self
        return row.residual_ms - (term.at_one_ms + term.per_client_ms * max(row.clients - 1.0, 0.0))

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
        prompt = (
            f" at a prompt the engine prefills in {self.reference_ms:.1f} ms alone (in proportion to a prompt's "
            "prefill)"
            if self.reference_ms is not None
            else ""
        )
        return (
            f"TTFT {self.name} adds {round(self.at_one_ms, 1) + 0.0:.1f} ms at one client and "
            f"{round(self.per_client_ms, 2) + 0.0:+.2f} ms "
            f"per added client{interval}{prompt} beyond the fitted engine, from {len(self.rows)} calibration levels "
            f"at concurrency {round(min(c), 1):g}..{round(max(c), 1):g}"
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

    def at_prompt(self, prefill_ms: float) -> TtftResidual:
        """The residual for a prompt the engine prefills in ``prefill_ms`` alone (``LoadTerm.scaled``)."""
        return TtftResidual(tuple(t.scaled(prefill_ms) for t in self.terms))

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
        term = self.term(50.0)  # p50's where fitted, else the mean's
        rows = term.rows
        group = prompt_group(row.prompt_tokens for row in rows)
        by_prompt: dict[float, list[float]] = {}  # a prompt length swept again joins its group
        for row in rows:
            left = term.unexplained_ms(row) + term.at_one_ms if term.reference_ms is not None else row.residual_ms
            by_prompt.setdefault(group[row.prompt_tokens], []).append(left)
        if len(by_prompt) < 2:
            return ""
        medians = [(prompt, float(np.median(v))) for prompt, v in sorted(by_prompt.items())]
        (short, low), (long, high) = medians[0], medians[-1]
        gap = high - low
        if abs(gap) < max(PROMPT_SLOPE_MIN_MS, PROMPT_SLOPE_SHARE * max(abs(low), abs(high))):
            return ""
        how = (
            "grows with the load in proportion to a prompt's prefill, and beyond that proportion"
            if term.reference_ms is not None
            else "is taken as the same for every prompt"
        )
        return (
            f"TTFT beyond the fitted engine differs with the prompt: median {low:.1f} ms at {short:.0f} prompt tokens, "
            f"{high:.1f} at {long:.0f}; it {how}, so a longer prompt's predicted TTFT "
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
        reference = _reference_ms(mine)
        scale = np.array([(row.prefill_ms or 0.0) / reference if reference else 1.0 for row in mine])
        x = np.array([row.clients - 1.0 for row in mine]) * scale
        y = np.array([row.residual_ms for row in mine])
        if np.unique(np.round(x, 1)).size < 2:
            terms.append(LoadTerm(percentile=q, at_one_ms=float(np.median(y)), per_client_ms=0.0, line=None, rows=mine))
            continue
        alone = np.array([row.clients <= ALONE_CLIENTS for row in mine])
        line = _through_one_client(fit_step_model(x, y), x, y, alone)
        terms.append(
            LoadTerm(
                percentile=q,
                at_one_ms=line.base_ms,
                per_client_ms=line.per_seq_ms,
                line=line,
                rows=mine,
                reference_ms=reference,
            )
        )
    return TtftResidual(tuple(terms)) if terms else None


def _through_one_client(line: StepModel, x: np.ndarray, y: np.ndarray, alone: np.ndarray) -> StepModel:
    """The residual's line through what the levels at one client measured, where some did: there the engine
    is idle and the residual is the front end alone (a few ms on NVIDIA's tables, where the Theil-Sen
    intercept over every level read 42 ms on Llama-3.3-70B and put a 500-token prompt's TTFT at one client
    93% high); the growth per client is the median of each loaded level's own slope from that point, its
    interval the middle 80% of those slopes (what a mix not measured may see). Without a level at one client,
    or with fewer than two loaded ones, the Theil-Sen line over every level."""
    loaded = ~alone & (x > 0)
    if not alone.any() or loaded.sum() < 2:
        return line
    at_one = float(np.median(y[alone]))
    slopes = (y[loaded] - at_one) / x[loaded]
    low, high = np.percentile(slopes, [10.0, 90.0])
    return dataclasses.replace(
        line,
        base_ms=at_one,
        per_seq_ms=float(np.median(slopes)),
        base_ci_ms=(at_one, at_one),
        per_seq_ci_ms=(float(low), float(high)),
    )


def _reference_ms(rows: Sequence[ResidualRow]) -> float | None:
    """The prefill (ms alone) the growth per client is fitted at, where the rows' prompts prefill at lengths
    ``PREFILL_APART`` apart (the median row's); None: every row at one prompt, or a prefill not known.

    What a real engine adds beyond the simulated one under load grows with the prompts waiting to prefill:
    on NVIDIA's NIM 8B table, 0.5 ms per added client at prompts of 200 tokens, 3 at 500, 50 at 5,000 and
    183 at 20,000 (a line the same for every prompt read 2.3 ms for all of them, and a 1,000-token mix's
    TTFT 60-70% low)."""
    prefills = [row.prefill_ms for row in rows]
    known = [p for p in prefills if p is not None and p > 0]
    if len(known) < len(prefills) or max(known) < PREFILL_APART * min(known):
        return None
    return float(np.median(known))
