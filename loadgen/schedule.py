"""Open-loop arrival plans, drawn in advance: pure functions of a seeded generator.

Offsets are seconds from the level's start, sorted and cumulative (an
absolute schedule), so sending never drifts by the time spent sleeping.
Gamma inter-arrivals with shape ``burstiness`` and mean ``1/rate``: shape 1
is Poisson, below 1 is burstier, above 1 is smoother.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

Arrival = Literal["constant", "poisson", "gamma"]
ARRIVALS: tuple[Arrival, ...] = get_args(Arrival)


def arrival_named(name: str) -> Arrival:
    """The arrival process a results file or a plan names (read from text: checked, not cast)."""
    for arrival in ARRIVALS:
        if arrival == name:
            return arrival
    raise ValueError(f"unknown arrival process {name!r}; expected one of {', '.join(ARRIVALS)}")


def arrival_offsets(
    rate: float,
    n: int,
    *,
    arrival: Arrival = "poisson",
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
    if arrival == "constant":
        return np.arange(n, dtype=np.float64) / rate
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    elif arrival == "gamma":
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
    arrival: Arrival = "poisson",
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
