"""The share of a level's requests that are independent samples: a closed loop's requests sent in one
cohort wait on the same engine steps, so they count as one sample of the tail, not as many."""

from __future__ import annotations

from loadgen.load import Load


def independent_share(load: Load, cohorts: int | None, offered: int | None) -> float:
    """The share of a level's requests that are independent samples (``LevelResult.independent_samples``):
    cohorts per request due in a closed loop, else all of them."""
    if load.kind == "concurrency" and cohorts is not None and offered:
        return min(1.0, cohorts / offered)
    return 1.0
