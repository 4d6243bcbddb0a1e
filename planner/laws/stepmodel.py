"""The decode step-latency law ``step_ms(b) = base_ms + per_seq_ms * b``, fitted robustly.

Theil–Sen: the slope is the median of all pairwise slopes, the intercept the
median of ``y - slope * x``. One bad level moves a median by at most one
rank, so it cannot drag the line (least squares would). Fit it on
unsaturated levels only: past the knee the batch stops growing and the
points pile up on a plateau (methodology §4.2).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from planner.laws.exact import exact

Tokens = TypeVar("Tokens", float, npt.NDArray[np.float64])  # one count, or one per request

MIN_LEVELS = 2
CURVATURE_RATIO = 1.5  # slope of the upper half vs the lower half beyond this: the data bend
OUTLIER_MADS = 4.0
EXTRAPOLATE_MIN_LEVELS = 3  # a line through two points cannot be checked
EXTRAPOLATE_MIN_R2 = 0.9


@dataclass(frozen=True, slots=True, kw_only=True)
class StepModel:
    """A fitted (or given) step law, with how far to trust it."""

    base_ms: float
    per_seq_ms: float
    fitted_batch_range: tuple[float, float]  # the batch sizes it was fitted on
    n_levels: int
    r_squared: float | None  # None for a law given by hand
    residual_mad_ms: float | None
    outlier_levels: tuple[int, ...] = ()  # indices whose residual exceeds 4 MADs (the fit discounted them)
    base_ci_ms: tuple[float, float] | None = None  # 95% bootstrap over levels
    per_seq_ci_ms: tuple[float, float] | None = None
    warnings: tuple[str, ...] = ()
    bends: bool = False  # the upper levels' slope differs from the lower levels' by more than CURVATURE_RATIO

    @property
    def extrapolates(self) -> bool:
        """Whether answers beyond the fitted range may rest on this law.

        A law stated by hand does (what-if); a fitted one needs at least
        three levels, R^2 >= 0.9 and no bend: otherwise one noisy level can
        put the limit anywhere past the data.
        """
        return self.trust_note == ""

    @property
    def trust_note(self) -> str:
        """Why the law does not extrapolate ("" when it does)."""
        if self.n_levels == 0:
            return ""
        if self.n_levels < EXTRAPOLATE_MIN_LEVELS:
            return f"fitted on {self.n_levels} levels"
        if self.r_squared is None or self.r_squared < EXTRAPOLATE_MIN_R2:
            r2 = "undefined" if self.r_squared is None else f"{self.r_squared:.2f}"
            return f"R^2 {r2} < {EXTRAPOLATE_MIN_R2:g}"
        return "the data bend" if self.bends else ""

    def step_ms(self, batch: npt.ArrayLike) -> np.ndarray:
        b: np.ndarray = np.asarray(batch, dtype=np.float64)
        out: np.ndarray = self.base_ms + self.per_seq_ms * b
        return out

    def tokens_per_s(self, batch: npt.ArrayLike) -> np.ndarray:
        """Decode token rate of one replica at batch ``b``: ``b * 1000 / step_ms(b)``."""
        b: np.ndarray = np.asarray(batch, dtype=np.float64)
        out: np.ndarray = b * 1000.0 / self.step_ms(b)
        return out

    def tokens_per_s_exact(self, batch: int) -> Fraction:
        """``tokens_per_s`` on exact decimals, for replica counts that sit on an integer boundary."""
        return Fraction(batch * 1000) / (exact(self.base_ms) + exact(self.per_seq_ms) * batch)

    def meets(self, batch: int, limit_ms: float) -> bool:
        """``step_ms(batch) <= limit_ms`` on exact decimals: a step exactly at an SLO meets it.

        Binary floats put ``25 + 0.4 * 87`` at ``59.800000000000004``, above a 59.8 ms SLO;
        every comparison of a law against a limit goes through here.
        """
        return exact(self.base_ms) + exact(self.per_seq_ms) * batch <= exact(limit_ms)

    def max_batch(self, slo_ms: float, *, cap: int | None = None) -> int | None:
        """Largest integer ``b >= 1`` with ``step_ms(b) <= slo_ms < step_ms(b + 1)`` (exact decimals).

        None when even batch 1 breaches. ``cap`` bounds the answer (the
        server's effective maximum batch); a flat law (``per_seq_ms <= 0``)
        is unbounded and returns ``cap``.

        Examples
        --------
        >>> StepModel.given(25, 0.4).max_batch(40)
        37
        >>> StepModel.given(25, 0.1).max_batch(25.7)
        7
        """
        base, slope, slo = exact(self.base_ms), exact(self.per_seq_ms), exact(slo_ms)
        if not self.meets(1, slo_ms):
            return None
        if slope <= 0:
            return cap
        b = math.floor((slo - base) / slope)
        while self.meets(b + 1, slo_ms):  # verify the boundary, never trust a division
            b += 1
        while b > 1 and not self.meets(b, slo_ms):
            b -= 1
        return b if cap is None else min(b, cap)

    def plus_per_seq(self, delta_ms: float) -> StepModel:
        """This law with ``delta_ms`` more per running sequence (its interval moved alike).

        How a decode law and the prefill its sequences carry become one mean step, and back:
        a request's prompt is prefilled once in its output's steps, so each running sequence
        adds ``prefill_ms_per_token * prompt / output`` to the mean step (docs/design.md).
        """
        if delta_ms == 0:
            return self
        ci = self.per_seq_ci_ms
        return dataclasses.replace(
            self,
            per_seq_ms=self.per_seq_ms + delta_ms,
            per_seq_ci_ms=None if ci is None else (ci[0] + delta_ms, ci[1] + delta_ms),
        )

    @classmethod
    def given(cls, base_ms: float, per_seq_ms: float) -> StepModel:
        """A law stated by hand (what-if planning), not fitted."""
        return cls(
            base_ms=base_ms,
            per_seq_ms=per_seq_ms,
            fitted_batch_range=(math.nan, math.nan),
            n_levels=0,
            r_squared=None,
            residual_mad_ms=None,
        )


def prefill_share_ms(ms_per_token: float, prompt_tokens: float, output_tokens: float | None) -> float:
    """Prefill's share of the mean step per running sequence: a request's prompt is prefilled once in
    its output's steps, so it adds ``ms_per_token * prompt / output`` to each (docs/design.md's step law).
    0 without a prefill term, a prompt or an output length."""
    if not output_tokens or ms_per_token <= 0 or prompt_tokens <= 0:
        return 0.0
    return ms_per_token * prompt_tokens / output_tokens


def prompt_pairs(prompt_tokens: Tokens) -> Tokens:
    """The (token, earlier token) pairs a prompt's prefill attends, itself included: ``P * (P + 1) / 2``,
    however it is chunked (attention's share of prefill, docs/design.md's step law)."""
    return prompt_tokens * (prompt_tokens + 1) / 2


def context_tokens(prompt_tokens: float, output_tokens: float) -> float:
    """Mean KV tokens a decoding sequence holds over its answer: its prompt and the tokens generated
    before each of its steps, ``(O - 1) / 2`` on average (docs/design.md's step law)."""
    return prompt_tokens + (output_tokens - 1) / 2


def fit_statistic(percentile: float | None) -> str:
    """The statistic a law is fitted on: ``tpot_p50``, or ``tpot_mean`` (None)."""
    return "tpot_mean" if percentile is None else f"tpot_p{percentile:g}"


MAX_PAIRS = 50_000  # Theil-Sen's pairwise slopes: exact up to ~317 points, a seeded sample of pairs beyond


def _theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Median pairwise slope, then median intercept. All pairs for a sweep (at most 100 levels); past
    ``MAX_PAIRS`` a fixed-seed sample of them, since a 3,000-row import once took 45 s and 300 MB here
    (the sample median's error is far inside the bootstrap interval)."""
    n = len(x)
    if n * (n - 1) // 2 <= MAX_PAIRS:
        i, j = np.triu_indices(n, k=1)
    else:
        rng = np.random.default_rng(n)
        i, j = rng.integers(0, n, size=MAX_PAIRS), rng.integers(0, n, size=MAX_PAIRS)
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        raise ValueError("the batch sizes must not all be equal")
    slope = float(np.median((y[j] - y[i])[keep] / dx[keep]))
    return float(np.median(y - slope * x)), slope


def fit_step_model(
    batch: npt.ArrayLike,
    step_ms: npt.ArrayLike,
    *,
    bootstrap: int = 200,
    seed: int = 0,
) -> StepModel:
    """Fit ``step_ms = base_ms + per_seq_ms * batch`` with Theil–Sen.

    Parameters
    ----------
    batch : array_like, shape (n,)
        Mean running batch per level (unsaturated levels only).
    step_ms : array_like, shape (n,)
        The TPOT statistic per level (mean, p50 or p95), in ms.
    bootstrap : int
        Resamples of the levels for the 95% intervals (0 to skip).
    seed : int
        Seed of the bootstrap's generator.

    Returns
    -------
    StepModel

    Raises
    ------
    ValueError
        Unequal lengths, non-finite values, or fewer than 2 levels.

    Examples
    --------
    >>> m = fit_step_model([1, 8, 32], [25.4, 28.2, 37.8])
    >>> round(m.base_ms, 6), round(m.per_seq_ms, 6)
    (25.0, 0.4)
    """
    x = np.asarray_chkfinite(batch, dtype=np.float64).copy()
    y = np.asarray_chkfinite(step_ms, dtype=np.float64).copy()
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError("batch and step_ms must be one-dimensional and of equal length")
    if len(x) < MIN_LEVELS:
        raise ValueError(f"a fit needs at least {MIN_LEVELS} levels, got {len(x)}")
    base, slope = _theil_sen(x, y)
    r2, mad, outliers = _residuals(x, y, base, slope)
    warnings, bends = _warnings(x, y, slope)
    base_ci = slope_ci = None
    if bootstrap and len(x) >= 3:
        base_ci, slope_ci = _bootstrap(x, y, bootstrap, seed)
    return StepModel(
        base_ms=base,
        per_seq_ms=slope,
        fitted_batch_range=(float(x.min()), float(x.max())),
        n_levels=len(x),
        r_squared=r2,
        residual_mad_ms=mad,
        outlier_levels=outliers,
        base_ci_ms=base_ci,
        per_seq_ci_ms=slope_ci,
        warnings=warnings,
        bends=bends,
    )


def _residuals(x: np.ndarray, y: np.ndarray, base: float, slope: float) -> tuple[float | None, float, tuple[int, ...]]:
    """R^2 (None: the levels' steps are all equal), the residuals' MAD, and the levels off the line by more than
    ``OUTLIER_MADS`` of it."""
    resid = y - (base + slope * x)
    mad = float(np.median(np.abs(resid - np.median(resid))))
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / total if total > 0 else None
    return r2, mad, tuple(int(k) for k in np.flatnonzero(np.abs(resid) > OUTLIER_MADS * max(mad, 1e-3)))


def _warnings(x: np.ndarray, y: np.ndarray, slope: float) -> tuple[tuple[str, ...], bool]:
    out = []
    bends = False
    if len(x) < 3:
        out.append(f"only {len(x)} unsaturated levels: the fit cannot be checked; sweep more levels")
    order = np.argsort(x)
    xs, ys = x[order], y[order]
    half = len(x) // 2
    # each half needs two distinct batches (levels repeated across sweeps can fill a half with one)
    if len(x) >= 4 and np.unique(xs[: half + 1]).size > 1 and np.unique(xs[half:]).size > 1:
        lo = _theil_sen(xs[: half + 1], ys[: half + 1])[1]
        hi = _theil_sen(xs[half:], ys[half:])[1]
        if lo > 0 and (hi / lo > CURVATURE_RATIO or hi / lo < 1 / CURVATURE_RATIO):
            bends = True
            out.append(
                f"the data bend: slope {lo:.3g} ms/seq on the lower levels, {hi:.3g} on the upper "
                "(a second regime, or a knee the classifier missed)"
            )
    if slope <= 0:
        out.append("TPOT does not grow with the batch: the law has no slope (client-bound, or too few levels)")
    return tuple(out), bends


def _bootstrap(x: np.ndarray, y: np.ndarray, n: int, seed: int) -> tuple[tuple[float, float], tuple[float, float]]:
    rng = np.random.default_rng(seed)
    bases, slopes = [], []
    for _ in range(n):
        k = rng.integers(0, len(x), size=len(x))
        if np.unique(x[k]).size < 2:
            continue
        b, s = _theil_sen(x[k], y[k])
        bases.append(b)
        slopes.append(s)
    if not bases:
        return (math.nan, math.nan), (math.nan, math.nan)
    return (
        (float(np.percentile(bases, 2.5)), float(np.percentile(bases, 97.5))),
        (float(np.percentile(slopes, 2.5)), float(np.percentile(slopes, 97.5))),
    )
