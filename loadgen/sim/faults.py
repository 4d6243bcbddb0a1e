"""Seeded per-request fault injection for the simulated server (all off by default)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields

import numpy as np


class Fault(enum.StrEnum):
    """What the simulator does wrong to one request."""

    HTTP_429 = "http_429"  # reject with 429 and Retry-After
    HTTP_500 = "http_500"
    HTTP_503 = "http_503"
    DROP = "drop"  # close the connection half-way through the stream
    MALFORMED = "malformed"  # send one chunk whose data is not JSON, half-way through
    RESET = "reset"  # close the connection as the request arrives: no response at all
    HANG = "hang"  # stop sending half-way, without [DONE], and keep the connection open
    STALL = "stall"  # pause the stream half-way for SimOptions.stall_ms, then go on
    TRICKLE = "trickle"  # write every chunk a few bytes at a time
    OVERSIZED = "oversized"  # one chunk half-way carries about 1 MiB of text


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultConfig:
    """Probability of each fault per request; at most one fault hits a request."""

    http_429: float = 0.0
    http_500: float = 0.0
    http_503: float = 0.0
    drop: float = 0.0
    malformed: float = 0.0
    reset: float = 0.0
    hang: float = 0.0
    stall: float = 0.0
    trickle: float = 0.0
    oversized: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            p = getattr(self, f.name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"fault {f.name}: probability must be in [0, 1], got {p}")
        if self.total() > 1.0:
            raise ValueError(f"fault probabilities add up to {self.total()}, more than 1")

    def total(self) -> float:
        return float(sum(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def parse(cls, specs: list[str]) -> FaultConfig:
        """Build from ``KIND=P`` strings such as ``http_500=0.1``."""
        values: dict[str, float] = {}
        known = [f.name for f in fields(cls)]
        for spec in specs:
            name, sep, prob = spec.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in known:
                raise ValueError(f"--fault {spec!r}: expected KIND=P with KIND one of {', '.join(known)}")
            try:
                values[name] = float(prob)
            except ValueError:
                raise ValueError(f"--fault {spec!r}: P must be a number in [0, 1]") from None
        return cls(**values)

    def draw(self, rng: np.random.Generator) -> Fault | None:
        """Pick the fault for one request (or none)."""
        if self.total() == 0.0:
            return None
        u = rng.random()
        for f in fields(self):
            u -= getattr(self, f.name)
            if u < 0:
                return Fault(f.name)
        return None
