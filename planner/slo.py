"""SLOs and the largest batch that keeps them (pure).

Grammar of ``--slo``: ``METRIC_pNN < VALUE[ms|s]`` (``tpot_p95<50ms``,
``ttft_p99 < 2s``, ``itl_p99<=100ms``) or ``error_rate < P[%]``. ``<`` and
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
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from loadgen.results import Metric, SloTarget
from planner.knee import Saturation
from planner.observations import Observations, percentile_ci_ms
from planner.stepmodel import StepModel

Quality = Literal["resolved", "unresolved", "extrapolated", "insufficient range", "breached at every level",
                  "capped at max batch", "model only"]

_SLO = re.compile(
    r"^\s*(?:(?P<metric>ttft_sent|ttft|tpot|itl|e2e)_p(?P<pct>\d+(?:\.\d+)?)|(?P<err>error_rate))"
    r"\s*(?P<op><=|<)\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|%)?\s*$"
)
EPS = 1e-9


def parse_slo(text: str) -> SloTarget:
    """``"tpot_p95<50ms"`` -> SloTarget(TPOT, 95, 50.0). Raises ValueError naming what was expected."""
    m = _SLO.match(text)
    if not m:
        raise ValueError(
            f"--slo {text!r}: expected METRIC_pNN<VALUE[ms|s] (METRIC: ttft, ttft_sent, tpot, itl, e2e), "
            "e.g. tpot_p95<50ms, or error_rate<1%"
        )
    value, unit = float(m.group("num")), m.group("unit")
    if m.group("err"):
        if unit not in (None, "%"):
            raise ValueError(f"--slo {text!r}: an error rate takes a fraction or a percentage")
        return SloTarget(None, None, value / 100 if unit == "%" else value)
    if unit == "%":
        raise ValueError(f"--slo {text!r}: a latency takes ms or s")
    pct = float(m.group("pct"))
    if not 0 < pct < 100:
        raise ValueError(f"--slo {text!r}: the percentile must be between 0 and 100")
    return SloTarget(Metric(m.group("metric")), pct, value * 1000 if unit == "s" else value)


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


@dataclass(frozen=True, slots=True)
class BatchLimit:
    """The largest batch under one SLO, and how sure we are."""

    slo: SloTarget
    measured: float | None  # interpolated batch where the measured curve crosses the SLO
    measured_batch: int | None
    model_batch: int | None
    batch: int | None  # the decision: min of both (None: even the smallest batch breaches)
    quality: Quality
    more_requests: int | None = None  # unresolved: about how many more requests per level would decide it
    note: str = ""


def model_limit(model: StepModel, slo: SloTarget, *, cap: int | None = None) -> BatchLimit:
    """The answer from a law alone (what-if planning)."""
    b = model.max_batch(slo.limit, cap=cap)
    return BatchLimit(slo, None, None, b, b, "model only" if b is not None else "breached at every level")


def max_batch_under_slo(
    obs: Observations, saturation: Saturation, slo: SloTarget, model: StepModel | None
) -> BatchLimit:
    """Measured, model and decided largest batch under ``slo`` (a latency SLO)."""
    cap = math.floor(saturation.max_batch + EPS) if saturation.max_batch else None
    idx = [i for i in saturation.unsaturated if slo.value(obs.results[i]) is not None]
    idx.sort(key=lambda i: obs.levels[i].batch)
    model_b = model.max_batch(slo.limit, cap=cap) if model is not None else None
    if not idx:
        return BatchLimit(slo, None, None, model_b, model_b, "insufficient range", note="no unsaturated level measured it")
    xs = np.array([obs.levels[i].batch for i in idx])
    ys = isotonic_increasing(np.array([slo.value(obs.results[i]) for i in idx], dtype=np.float64))
    meets = ys <= slo.limit + EPS
    if not meets[0]:
        batch = model_b if model_b is not None and model_b < xs[0] else None
        return BatchLimit(slo, None, None, model_b, batch, "breached at every level",
                          note=f"the smallest level ({obs.levels[idx[0]].label}) already breaches")
    k = int(np.flatnonzero(meets)[-1])
    if k < len(xs) - 1:
        b_star = xs[k] + (slo.limit - ys[k]) * (xs[k + 1] - xs[k]) / (ys[k + 1] - ys[k])
        measured_b = max(1, math.floor(b_star + EPS))
        batch = min(measured_b, model_b) if model_b is not None else measured_b
        quality, more = _resolution(obs, idx[k], idx[k + 1], slo)
        note = _disagreement(measured_b, model_b)
        return BatchLimit(slo, float(b_star), measured_b, model_b, batch, quality, more, note)
    if cap is not None:
        batch = min(cap, model_b) if model_b is not None else cap
        return BatchLimit(slo, None, cap, model_b, batch, "capped at max batch",
                          note=f"every unsaturated level meets the SLO; the server saturates at B = {cap}")
    largest = obs.levels[idx[-1]].label
    if model_b is None:
        top = max(1, math.floor(xs[-1] + EPS))
        return BatchLimit(slo, None, top, None, top, "insufficient range",
                          note=f"every measured level meets the SLO up to {largest} and there is no law to "
                               "extrapolate with; extend the sweep (answer held at the largest measured batch)")
    next_step = xs[-1] * (xs[-1] / xs[-2]) if len(xs) >= 2 and xs[-2] > 0 else xs[-1]
    if model_b <= next_step:
        return BatchLimit(slo, None, None, model_b, model_b, "extrapolated",
                          note=f"the sweep never crossed the SLO; the law's answer lies within one step of "
                               f"the largest level ({largest})")
    limit = math.floor(next_step + EPS)
    return BatchLimit(slo, None, None, model_b, limit, "insufficient range",
                      note=f"the SLO is not crossed within one sweep step of the data; extend the sweep "
                           f"(answer held at {limit})")


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
