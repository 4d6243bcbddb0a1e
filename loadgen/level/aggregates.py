"""Means read across levels (prompt, output, reasoning share) and whether two levels share a load: one place
computes each, for the report, the planner and the summary alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.level.result import LevelResult


def duplicate_load(levels: Sequence[LevelResult]) -> str | None:
    """The label of a load two of ``levels`` share, if any: a plan or a report would count it twice."""
    seen: set[str] = set()
    for level in levels:
        if level.load.label in seen:
            return level.load.label
        seen.add(level.load.label)
    return None


def mean_prompt_tokens(levels: Sequence[LevelResult]) -> float | None:
    """Mean prompt tokens per completed request that reported usage, over these levels (a pooling level's:
    per input, the length asked of each text of its batches; a rerank input is the query and a document)."""
    reported = sum(lv.prompt_tokens_reported * _inputs_per_request(lv) for lv in levels)
    return sum(lv.prompt_tokens for lv in levels) / reported if reported else None


def _inputs_per_request(level: LevelResult) -> float:
    return level.inputs / level.completed if level.inputs and level.completed else 1.0


def reasoning_share(levels: Sequence[LevelResult]) -> float:
    """Of these levels' output tokens (completed requests), the share that was reasoning (0: none)."""
    out = sum(lv.output_tokens for lv in levels)
    return min(sum(lv.reasoning_tokens for lv in levels) / out, 1.0) if out else 0.0


def mean_output_tokens(levels: Sequence[LevelResult]) -> float | None:
    """Mean output tokens per completed request, over these levels."""
    completed = sum(lv.completed for lv in levels)
    return sum(lv.output_tokens for lv in levels) / completed if completed else None
