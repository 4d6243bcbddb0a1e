"""One level measured by several workers over the same window, merged into one ``LevelResult`` (pure).

Histograms merge exactly (``add``); counters and in-flight means add up; a count some share did not keep
(None) is unknown for the whole level, never a partial sum presented as the total.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

from loadgen.errors import ErrorKind
from loadgen.histogram import LatencyHistogram
from loadgen.results import LevelResult, Metric

N = TypeVar("N", int, float)


def merge_levels(parts: Sequence[LevelResult]) -> LevelResult:
    """Combine the shares of one level (the first share's load and settings stand for all)."""
    if not parts:
        raise ValueError("merge_levels needs at least one part")
    first = parts[0]
    hists = {m: first.histograms[m].copy() for m in Metric}
    for part in parts[1:]:
        for m in Metric:
            hists[m].merge(part.histograms[m])
    errors: dict[ErrorKind, int] = {}
    for part in parts:
        for kind, n in part.errors.items():
            errors[kind] = errors.get(kind, 0) + n
    servers = [p.server for p in parts if p.server is not None]
    trends = [p.ttft_trend for p in parts]
    return replace(
        first,
        window_s=max(p.window_s for p in parts),
        completed=sum(p.completed for p in parts),
        errors=errors,
        output_tokens=sum(p.output_tokens for p in parts),
        window_output_tokens=sum(p.window_output_tokens for p in parts),
        prompt_tokens=sum(p.prompt_tokens for p in parts),
        prompt_tokens_reported=sum(p.prompt_tokens_reported for p in parts),
        tokens_estimated=any(p.tokens_estimated for p in parts),
        achieved_concurrency=sum(p.achieved_concurrency for p in parts),
        histograms=hists,
        server=servers[0] if servers else None,  # one scraper per level: the first worker's
        complete=all(p.complete for p in parts),
        workers=sum(p.workers for p in parts),
        good=_sum_known(p.good for p in parts),
        client_cpu_s=_sum_known(p.client_cpu_s for p in parts),
        offered=_sum_known(p.offered for p in parts),
        cohorts=_sum_known(p.cohorts for p in parts),
        empty=sum(p.empty for p in parts),
        cut=sum(p.cut for p in parts),
        ttft_trend=None if any(t is None for t in trends) else tuple(map(sum, zip(*(t or () for t in trends)))),
        by_turn=_merge_turns(parts),
        loop_lag_p99_ms=max((p.loop_lag_p99_ms for p in parts if p.loop_lag_p99_ms is not None), default=None),
        runqueue_wait_s=_sum_known(p.runqueue_wait_s for p in parts),
        bound_workers=tuple(
            f"worker {i}: {'; '.join(p.client_bound_causes)}" for i, p in enumerate(parts) if p.client_bound
        ),
    )


def _sum_known(values: Iterable[N | None]) -> N | None:
    """The sum, or None where any share did not keep the count."""
    known = list(values)
    if any(v is None for v in known):
        return None
    total: N = sum(v for v in known if v is not None)
    return total


def _merge_turns(parts: Sequence[LevelResult]) -> dict[int, dict[Metric, LatencyHistogram]] | None:
    """Per-turn histograms of a multi-turn level, merged turn by turn."""
    turns: dict[int, dict[Metric, LatencyHistogram]] = {}
    for part in parts:
        for t, hists in (part.by_turn or {}).items():
            merged = turns.setdefault(t, {})
            for m, h in hists.items():
                if m in merged:
                    merged[m].merge(h)
                else:
                    merged[m] = h.copy()
    return dict(sorted(turns.items())) or None
