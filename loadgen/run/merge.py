"""One level measured by several workers over the same window, merged into one ``LevelResult`` (pure).

Histograms merge exactly (``add``); counters and in-flight means add up; a count some share did not keep
(None) is unknown for the whole level, never a partial sum presented as the total.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from loadgen.errors import ErrorKind
from loadgen.histogram import LatencyHistogram
from loadgen.results import LevelResult, Metric, ModelBreakdown

N = TypeVar("N", int, float)

#: Counts and in-flight means that add up over the shares.
ADDED = (
    "completed",
    "output_tokens",
    "window_output_tokens",
    "prompt_tokens",
    "prompt_tokens_reported",
    "achieved_concurrency",
    "workers",
    "empty",
    "cut",
    "reasoning_tokens",
    "reasoning_counted",
    "tool_call_turns",
    "token_events",
    "usage_per_chunk",
    "image_tokens",
    "image_tokens_reported",
    "inputs",
)
#: The same, where a share may not have kept the count (None): then unknown for the level.
ADDED_WHERE_KEPT = ("good", "client_cpu_s", "offered", "cohorts", "runqueue_wait_s")


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
    added: dict[str, Any] = {name: sum(getattr(p, name) for p in parts) for name in ADDED}
    added |= {name: _sum_known(getattr(p, name) for p in parts) for name in ADDED_WHERE_KEPT}
    return replace(
        first,
        window_s=max(p.window_s for p in parts),
        errors=errors,
        tokens_estimated=any(p.tokens_estimated for p in parts),
        histograms=hists,
        server=servers[0] if servers else None,  # one scraper per level: the first worker's
        complete=all(p.complete for p in parts),
        **added,
        ttft_trend=None if any(t is None for t in trends) else tuple(map(sum, zip(*(t or () for t in trends)))),
        by_turn=_merge_turns(parts),
        by_model=_merge_models(parts),
        loop_lag_p99_ms=max((p.loop_lag_p99_ms for p in parts if p.loop_lag_p99_ms is not None), default=None),
        outage_s=max((p.outage_s for p in parts if p.outage_s is not None), default=None),
        target_gone=any(p.target_gone for p in parts),
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


def _merge_models(parts: Sequence[LevelResult]) -> dict[str, ModelBreakdown] | None:
    """Each model's part of a split level, merged model by model."""
    models: dict[str, ModelBreakdown] = {}
    for part in parts:
        for name, share in (part.by_model or {}).items():
            models[name] = models[name].merged(share) if name in models else share
    return dict(sorted(models.items())) or None
