"""SLOs and the largest batch that keeps them (pure).

``--slo`` is the threshold grammar's promise (``planner.evidence.thresholds``): ``tpot_p95<50ms``,
``ttft_p99 < 2s``, ``itl_p99<=100ms`` or ``error_rate < P[%]``. ``<`` and
``<=`` both mean "at most": a level exactly at the limit complies, as in the
chapter (step 39.8 ms fits a 40 ms budget, 40.0 would too).

Measured answer (authoritative inside the measured range): the SLO's
percentile per unsaturated level, made monotone in the batch
(pool-adjacent-violators), then linear interpolation between the last level
that meets the SLO and the first that breaks it. Model answer: the fitted
law inverted exactly at integer boundaries. The decision is the smaller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from loadgen.slo_target import SLO_METRICS, SloTarget
from planner.evidence.knee import Saturation
from planner.evidence.observations import Observations, percentile_ci_ms
from planner.evidence.thresholds import ThresholdSyntaxError, UnknownQuantity, parse_threshold
from planner.laws.stepmodel import StepModel

Quality = Literal[
    "resolved",  # the measured curve crosses the SLO between two levels whose intervals decide it
    "unresolved",  # it crosses, but a percentile's interval straddles the SLO: more requests would decide it
    "extrapolated",  # the sweep never crossed; a trusted law's answer lies within one sweep step of the data
    "lower bound",  # the sweep never crossed and nothing trusted says where it does: at least this batch
    "not binding",  # a lower bound above the batch another SLO decides: this SLO does not limit the plan
    "capped at max batch",  # every unsaturated level meets it; the server's plateau B bounds the batch
    "any batch",  # a flat law: every batch meets it; the server's cap bounds the batch
    "breached at every level",
    "below the floor",  # a law whose batch-1 step already breaches: no batch meets it
    "insufficient range",  # no unsaturated level measured it
    "model only",  # what-if: the stated law alone
    "predicted",  # a length model fitted on other mixes predicts it (``planner.capacity.mix_forecast``)
    "unknown",  # imported numbers: it crosses between two levels, but without samples no interval decides it
]
EPS = 1e-9


def parse_slo(text: str) -> SloTarget:
    """``"tpot_p95<50ms"`` -> SloTarget(TPOT, 95, 50.0). Raises ValueError naming what was expected.

    The threshold grammar's (``planner.evidence.thresholds``) promises: a latency's percentile or mean, or
    the error rate, at most a value, at every level."""
    expected = (
        f"--slo {text!r}: expected METRIC_pNN<VALUE[ms|s] or METRIC_mean<VALUE[ms|s] (METRIC: "
        f"{', '.join(m.value for m in SLO_METRICS)}), e.g. tpot_p95<50ms, ttft_p99.9<2s, tpot_mean<40ms, "
        "or error_rate<1%"
    )
    try:
        threshold = parse_threshold(text, "--slo")
    except (ThresholdSyntaxError, UnknownQuantity):
        raise ValueError(expected) from None
    if threshold.op not in ("<", "<=") or threshold.level is not None or threshold.value < 0:
        raise ValueError(expected)
    if threshold.quantity == "error_rate":
        return SloTarget(metric=None, percentile=None, limit=threshold.value)
    if threshold.latency is None:  # goodput and the rates are checks a gate makes, not promises a plan sizes
        raise ValueError(expected)
    try:
        return SloTarget.from_key(f"{threshold.quantity}_ms", threshold.value)
    except ValueError:
        raise ValueError(expected) from None


def isotonic_increasing(y: np.ndarray) -> np.ndarray:
    """Pool-adjacent-violators: the closest non-decreasing sequence (least squares)."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in y.astype(np.float64):
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return np.concatenate([np.full(int(c), s / c) for s, c in blocks])


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchLimit:
    """The largest batch under one SLO, how sure we are, and the law that was used for it."""

    slo: SloTarget
    quality: Quality
    batch: int | None = None  # the decision (None: no batch meets it; a lower bound when quality says so)
    measured: float | None = None  # interpolated batch where the measured curve crosses the SLO
    measured_batch: int | None = None
    model_batch: int | None = None
    more_requests: int | None = None  # unresolved: about how many more requests per level would decide it
    note: str = ""
    model: StepModel | None = None  # the law fitted on this SLO's own percentile (None: TTFT/E2E, no law)

    @property
    def is_lower_bound(self) -> bool:
        return self.quality in ("lower bound", "not binding")


def model_limit(model: StepModel, slo: SloTarget, *, cap: int | None = None) -> BatchLimit:
    """The answer from a law alone (what-if planning).

    ``cap`` (the server's ``--max-num-seqs`` in use) bounds only a flat law, which
    every batch meets; otherwise the SLO's answer stands on its own, and the plan
    says what raising the cap to it would buy.
    """
    if model.per_seq_ms <= 0 and model.step_ms(1) <= slo.limit + EPS:
        bound = f"--current-batch {cap}" if cap is not None else "the server's cap (give --current-batch)"
        return BatchLimit(
            slo=slo,
            model_batch=cap,
            batch=cap,
            quality="any batch",
            model=model,
            note=f"any batch meets this SLO; the batch is bounded by {bound}",
        )
    b = model.max_batch(slo.limit)  # the SLO's own answer: the cap in use is the plan's to weigh, not this one's
    if b is None:
        return BatchLimit(slo=slo, quality="below the floor", model=model, note=floor_note(model, slo))
    return BatchLimit(slo=slo, model_batch=b, batch=b, quality="model only", model=model)


def floor_note(model: StepModel, slo: SloTarget) -> str:
    """Why no batch can meet a TPOT SLO below the law's batch-1 step, and what can move that floor."""
    return (
        f"no batch meets it: even batch 1 takes {float(model.step_ms(1)):.1f} ms per step (base "
        f"{model.base_ms:.4g} ms); only a faster step moves that floor: faster hardware, a smaller or quantised "
        "model, or more tensor parallelism"
    )


def max_batch_under_slo(
    obs: Observations, saturation: Saturation, slo: SloTarget, model: StepModel | None
) -> BatchLimit:
    """Measured, model and decided largest batch under ``slo`` (a latency SLO).

    The model (the law fitted on the SLO's own percentile) answers beyond the
    measured levels only when it extrapolates (``StepModel.extrapolates``);
    otherwise a sweep that never crossed the SLO gives a lower bound.
    """
    cap = math.floor(saturation.max_batch + EPS) if saturation.max_batch else None
    model_b = model.max_batch(slo.limit, cap=cap) if model is not None else None
    search = _Search(
        obs=obs,
        slo=slo,
        model=model,
        model_b=model_b,
        trusted_b=model_b if model is not None and model.extrapolates else None,
    )
    idx = [i for i in saturation.unsaturated if slo.value(obs.results[i]) is not None]
    idx.sort(key=lambda i: obs.levels[i].batch)
    if not idx:
        quantity = slo.quantity
        absent = next(
            (why for i in saturation.unsaturated if quantity and (why := obs.results[i].absent_because(quantity))),
            None,
        )
        return search.limit(
            None, None, search.trusted_b, "insufficient range", note=absent or "no unsaturated level measured it"
        )
    xs = np.array([obs.levels[i].batch for i in idx])
    ys = isotonic_increasing(np.array([slo.value(obs.results[i]) for i in idx], dtype=np.float64))
    meets = ys <= slo.limit + EPS
    if not meets[0]:
        return search.breached_first(obs.levels[idx[0]].label, float(xs[0]))
    k = int(np.flatnonzero(meets)[-1])
    if k < len(xs) - 1:
        b_star = xs[k] + (slo.limit - ys[k]) * (xs[k + 1] - xs[k]) / (ys[k + 1] - ys[k])
        measured_b = max(1, math.floor(b_star + EPS))
        batch = min(measured_b, model_b) if model_b is not None else measured_b
        quality, more = _resolution(obs, idx[k], idx[k + 1], slo)
        return search.limit(float(b_star), measured_b, batch, quality, more, _disagreement(measured_b, model_b))
    if cap is not None:
        batch = min(cap, model_b) if model_b is not None else cap
        return search.limit(  # the plateau B is the server's, not a crossing of the SLO: nothing measured to quote
            None,
            None,
            batch,
            "capped at max batch",
            note=f"every unsaturated level meets the SLO; the server saturates at B = {cap}",
        )
    return search.never_crossed(obs.levels[idx[-1]].label, xs)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Search:
    """One SLO's batch search: what every answer it gives carries (the SLO, its law and the law's batch)."""

    obs: Observations
    slo: SloTarget
    model: StepModel | None  # the law fitted on the SLO's own percentile
    model_b: int | None  # that law's largest batch under the SLO
    trusted_b: int | None  # the same, where the law may answer beyond the measured levels

    def limit(
        self,
        measured: float | None,
        measured_b: int | None,
        batch: int | None,
        quality: Quality,
        more: int | None = None,
        note: str = "",
    ) -> BatchLimit:
        return BatchLimit(
            slo=self.slo,
            measured=measured,
            measured_batch=measured_b,
            model_batch=self.model_b,
            batch=batch,
            quality=quality,
            more_requests=more,
            note=note,
            model=self.model,
        )

    def breached_first(self, smallest: str, first_batch: float) -> BatchLimit:
        """The smallest level already breaches: below the law's floor, or below the levels measured."""
        if self.model is not None and self.model_b is None:  # the batch-1 step breaches too: what-if's floor
            return self.limit(None, None, None, "below the floor", note=floor_note(self.model, self.slo))
        below_first = self.trusted_b if self.trusted_b is not None and self.trusted_b < first_batch else None
        return self.limit(
            None, None, below_first, "breached at every level", note=f"the smallest level ({smallest}) already breaches"
        )

    def never_crossed(self, largest: str, xs: np.ndarray) -> BatchLimit:
        """Every level meets the SLO: a lower bound, or the law's answer where it lies within one sweep step."""
        top = max(1, math.floor(xs[-1] + EPS))
        if self.trusted_b is None:
            why = (
                "no law was fitted"
                if self.model is None
                else f"the {model_name(self.slo)} law does not extrapolate ({self.model.trust_note})"
            )
            return self.limit(
                None,
                top,
                top,
                "lower bound",
                note=f"the SLO was not reached in the sweep (every level up to {largest} meets it) and {why}; "
                "extend the sweep to find the limit",
            )
        next_step = xs[-1] * (xs[-1] / xs[-2]) if len(xs) >= 2 and xs[-2] > 0 else xs[-1]
        if self.trusted_b <= next_step:
            return self.limit(
                None,
                None,
                self.trusted_b,
                "extrapolated",
                note=f"the sweep never crossed the SLO; the law's answer lies within one step of the largest "
                f"level ({largest})",
            )
        held = max(top, math.floor(next_step + EPS))
        return self.limit(
            None,
            top,
            held,
            "lower bound",
            note=f"the SLO was not reached in the sweep; the law puts the limit at {self.trusted_b}, more than one "
            f"sweep step past the largest level ({largest}); extend the sweep to confirm",
        )


def model_name(slo: SloTarget) -> str:
    """The law an SLO is answered with: ``tpot_p95``."""
    return slo.key.removesuffix("_ms")


def _disagreement(measured: int, model: int | None) -> str:
    if model is None or measured == model:
        return ""
    if abs(measured - model) > max(1.0, 0.1 * max(measured, model)):
        return f"measured ({measured}) and model ({model}) answers differ by more than 10%"
    return ""


def _resolution(obs: Observations, below: int, above: int, slo: SloTarget) -> tuple[Quality, int | None]:
    """Resolved when the percentile's interval sits below the SLO at one level and above it at the next."""
    if slo.metric is None or slo.percentile is None:
        return "resolved", None
    short = [slo.samples_needed - obs.results[i].histograms[slo.metric].count for i in (below, above)]
    if max(short) > 0:  # the same floor as the levels' trust verdicts
        return "unresolved", max(short)
    ci_below = percentile_ci_ms(obs.results[below], slo.metric, slo.percentile)
    ci_above = percentile_ci_ms(obs.results[above], slo.metric, slo.percentile)
    if ci_below is None or ci_above is None:
        return "unresolved", None
    if ci_below[1] <= slo.limit < ci_above[0]:
        return "resolved", None
    more = 0
    for i, (lo, hi) in ((below, ci_below), (above, ci_above)):
        value = slo.value(obs.results[i])
        n = obs.results[i].histograms[slo.metric].count
        distance = abs((value or slo.limit) - slo.limit)
        half = max(hi - lo, 1e-9) / 2
        if lo <= slo.limit <= hi and distance > 0:
            more = max(more, math.ceil(n * (half / distance) ** 2) - n)
        elif distance == 0:
            more = max(more, 10 * n)
    return "unresolved", more or None
