"""One level measured by several workers over the same window, merged into one ``LevelResult`` (pure).

Each field combines by the rule declared beside it (``loadgen.level.declared``): histograms merge
exactly, counters and in-flight means add up, a count some share did not keep (None) is unknown for
the whole level, never a partial sum presented as the total. Nothing here names a field's counter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from loadgen.level.declared import combine
from loadgen.level.result import LevelResult


def merge_levels(parts: Sequence[LevelResult]) -> LevelResult:
    """Combine the shares of one level (the first share's load and settings stand for all)."""
    if not parts:
        raise ValueError("merge_levels needs at least one part")
    merged = replace(parts[0], **combine(parts))
    # a worker bound on its own is named: the merged averages would hide one saturated worker among idle ones
    bound = tuple(f"worker {i}: {'; '.join(p.client_bound_causes)}" for i, p in enumerate(parts) if p.client_bound)
    return replace(merged, bound_workers=bound)
