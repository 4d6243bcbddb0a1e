"""A level's human and ``jq`` block: milliseconds and rates, written beside the histograms, never read back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from loadgen.histogram import LatencyHistogram
from loadgen.level.aggregates import mean_output_tokens, mean_prompt_tokens
from loadgen.quantity import Metric

if TYPE_CHECKING:
    from loadgen.level.result import LevelResult

SUMMARY_PERCENTILES: Final = (50, 90, 95, 99)
MULTI_TOKEN_EVENTS: Final = 1.2  # output tokens per token event beyond this: several tokens an event


def level_summary(level: LevelResult) -> dict[str, Any]:
    """The summary block of one level (``LevelResult.summary``)."""
    out: dict[str, Any] = {f"{metric.value}_ms": metric_summary(level.histograms[metric]) for metric in Metric}
    out.update(
        output_tokens_per_s=rounded(level.output_tokens_per_s),
        requests_per_s=rounded(level.requests_per_s),
        offered_per_s=rounded(level.offered_per_s),
        achieved_concurrency=round(level.achieved_concurrency, 3),
        completed=level.completed,
        failed=level.failed,
        cut=level.cut,
        errors={k.value: v for k, v in sorted(level.errors.items())},
        prompt_tokens_mean=rounded(mean_prompt_tokens([level])),
        output_tokens_mean=rounded(mean_output_tokens([level])),
        tokens_estimated=level.tokens_estimated,
        client_bound=level.client_bound,
        client={
            "loop_lag_p99_ms": rounded(level.loop_lag_p99_ms),
            "steal_share": rounded(level.steal_share),
            "core_wait_ratio": rounded(level.core_wait_ratio),
        },
        load=level.load.to_json(),
    )
    return out | _optional_parts(level)


def _optional_parts(level: LevelResult) -> dict[str, Any]:
    """The parts only some levels have: reasoning, images, pooling, several tokens an event, models, turns."""
    out: dict[str, Any] = {}
    if level.reasoning_tokens or level.tool_call_turns:  # a reasoning model's or an agent's level
        out["reasoning_tokens_mean"] = rounded(level.reasoning_tokens / level.completed if level.completed else None)
        out["reasoning_tokens_from"] = "counted" if level.reasoning_counted else "usage"
        out["tool_call_turns"] = level.tool_call_turns
    if level.image_tokens_reported:
        out["image_tokens_mean"] = rounded(level.image_tokens / level.image_tokens_reported)
    if level.pooling:
        out.update(
            inputs_per_s=rounded(level.inputs_per_s),
            prompt_tokens_per_s=rounded(level.prompt_tokens_per_s),
            inputs_per_request=rounded(level.inputs / level.completed if level.completed else None),
        )
    if (per_event := level.tokens_per_event) is not None and per_event > MULTI_TOKEN_EVENTS:
        out["tokens_per_event"] = rounded(per_event)
        out["itl_per"] = "token" if level.itl_per_token else "event"
    if level.by_model:
        out["by_model"] = {
            name: {
                "completed": part.completed,
                "failed": sum(part.errors.values()),
                **{f"{m.value}_ms": metric_summary(h) for m, h in part.histograms.items()},
            }
            for name, part in level.by_model.items()
        }
    if level.by_turn:
        out["by_turn"] = {
            str(t): {f"{m.value}_ms": metric_summary(h) for m, h in hists.items()} for t, hists in level.by_turn.items()
        }
    return out


def metric_summary(h: LatencyHistogram) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {"mean": _ms(h.mean_us())}
    for p in SUMMARY_PERCENTILES:
        out[f"p{p}"] = _ms(h.percentile_us(p))
    out["max"] = _ms(h.max_us())
    out["count"] = h.count
    return out


def _ms(value_us: float | None) -> float | None:
    return None if value_us is None else round(value_us / 1000.0, 3)


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
