"""How a request's prompt or output length is drawn: a mean and a relative spread (pure).

The workload draws each request's lengths from these; the planner draws the same shapes to simulate a
run it did not send (``planner.laws.lengthsample``), so both sides share one definition of each distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.choices import LengthDist


@dataclass(frozen=True, slots=True)
class Lengths:
    """A distribution of token counts: ``mean`` with relative ``spread``.

    fixed: always ``mean``; uniform: ``mean*(1±spread)``; normal: std
    ``spread*mean``; lognormal: mean ``mean`` and std ``spread*mean``.
    Draws are rounded and clamped to at least 1.
    """

    mean: int
    dist: LengthDist = LengthDist.FIXED
    spread: float = 0.0

    def __post_init__(self) -> None:
        if self.mean < 1:
            raise ValueError(f"token count must be >= 1, got {self.mean}")
        if self.spread < 0:
            raise ValueError(f"spread must be >= 0, got {self.spread}")

    def draw(self, rng: np.random.Generator) -> int:
        m, s = float(self.mean), self.spread
        if self.dist == "fixed" or s == 0:
            return self.mean
        if self.dist == "uniform":
            x = rng.uniform(m * (1 - s), m * (1 + s))
        elif self.dist == "normal":
            x = rng.normal(m, s * m)
        else:
            sigma2 = np.log1p(s * s)
            x = rng.lognormal(np.log(m) - sigma2 / 2, np.sqrt(sigma2))
        return max(1, round(float(x)))
