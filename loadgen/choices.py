"""The named choices that flags and profile fields take (and the defaults they show), importing nothing heavier
than ``enum``.

A command's ``--help`` builds its options from its signature, so every choice it names must import
without the I/O stack (aiohttp, httpx, numpy, the planner); their modules import them from here.
"""

from __future__ import annotations

from enum import StrEnum


class Transport(StrEnum):
    """The HTTP client a run streams with (``--transport``; docs/failure-handling.md on each)."""

    NATIVE = "native"
    AIOHTTP = "aiohttp"
    HTTPX = "httpx"


class EventLoop(StrEnum):
    AUTO = "auto"
    ASYNCIO = "asyncio"
    UVLOOP = "uvloop"


class Arrival(StrEnum):
    """How an open-loop level's requests arrive."""

    CONSTANT = "constant"
    POISSON = "poisson"
    GAMMA = "gamma"
    TRACE = "trace"  # replayed at a trace's recorded times (``--trace``): never drawn


MOONCAKE_BLOCK_TOKENS = 512  # the block size of Mooncake's published traces (their hash_ids name 512-token blocks)

DRAWN_ARRIVALS: tuple[Arrival, ...] = (Arrival.CONSTANT, Arrival.POISSON, Arrival.GAMMA)
SIMULATED_ARRIVALS: tuple[Arrival, ...] = (
    Arrival.POISSON,
    Arrival.GAMMA,
)  # the sizing simulation draws; it replays none


class LengthDist(StrEnum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    NORMAL = "normal"
    LOGNORMAL = "lognormal"

    def relative_variance(self, spread: float) -> float:
        """A draw's variance over its mean squared at relative ``spread`` (``Lengths.draw``, before rounding and
        the clamp at 1): what a length-weighted mean of the draws adds to their plain mean."""
        if self == LengthDist.FIXED or spread <= 0:
            return 0.0
        return spread * spread / 3 if self == LengthDist.UNIFORM else spread * spread  # mean*(1 +- s); std s*mean


class Mode(StrEnum):
    """The simulated engine's batching: continuous, or static (a batch runs to its longest request)."""

    CONTINUOUS = "continuous"
    STATIC = "static"


class LoadMode(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    TRACE = "trace"


class Placement(StrEnum):
    """Ray's placement of the load actors (``--ray-placement``)."""

    SPREAD = "spread"
    PACK = "pack"


class Scrape(StrEnum):
    """Whether a run reads the server's ``/metrics`` (auto: where it answers)."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class Start(StrEnum):
    STAGGERED = "staggered"
    BURST = "burst"
