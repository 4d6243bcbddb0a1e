"""A results file as llm-d-benchmark's benchmark report (schema v0.1): one report per level (pure).

llm-d's analysis notebooks and dashboards read one report per benchmark stage:
``scenario`` (model, load) and ``metrics`` (time, requests, latency,
throughput, service). The mapping, field by field, is in docs/export.md. Two
choices that matter when numbers are compared across tools:
``time_to_first_token`` is loadgen's TTFT, timed from when each request was
due (an open loop's queueing at the client counts, as docs/design.md defines it;
TTFT from the send is in ``metadata``); ``time_per_output_token`` is loadgen's
per-request TPOT and ``inter_token_latency`` its pooled ITL, both in
ms/token. ``scenario.load.name`` is ``loadgen``, which llm-d's own validator
(an enumeration of its harnesses) does not list: its readers take the rest.
"""

from __future__ import annotations

from typing import Any

from loadgen.histogram import LatencyHistogram
from loadgen.level.aggregates import mean_output_tokens, mean_prompt_tokens
from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results

VERSION = "0.1"
PERCENTILES = {"p1": 1, "p5": 5, "p10": 10, "p25": 25, "p50": 50, "p75": 75, "p90": 90, "p95": 95, "p99": 99,
               "p99p9": 99.9}  # fmt: skip
LOAD_TYPES = {"concurrency": "closed-loop concurrency", "rate": "open-loop request rate"}


def llmd_reports(results: Results) -> list[dict[str, Any]]:
    """One benchmark report per level, in the results' order."""
    return [_report(results, level) for level in results.levels]


def _report(results: Results, level: LevelResult) -> dict[str, Any]:
    latency = {
        "time_to_first_token": _statistics(level.histograms[Metric.TTFT], "ms"),
        "time_per_output_token": _statistics(level.histograms[Metric.TPOT], "ms/token"),
        "inter_token_latency": _statistics(level.histograms[Metric.ITL], "ms/token"),
        "request_latency": _statistics(level.histograms[Metric.E2E], "ms"),
    }
    prompt, output = mean_prompt_tokens([level]), mean_output_tokens([level])
    window = level.window_s
    input_rate = level.prompt_tokens / window if window > 0 and level.prompt_tokens_reported else None
    output_rate = level.output_tokens_per_s
    metrics: dict[str, Any] = {
        "time": {"duration": window},
        "requests": {
            "total": level.completed + level.failed,
            "failures": level.failed,
            "incomplete": level.cut,
            "input_length": {"units": "count", "mean": prompt},
            "output_length": {"units": "count", "mean": output},
        },
        "latency": {key: stats for key, stats in latency.items() if stats is not None},
        "throughput": {
            "input_tokens_per_sec": input_rate,
            "output_tokens_per_sec": output_rate,
            "total_tokens_per_sec": (input_rate or 0.0) + (output_rate or 0.0),
            "requests_per_sec": level.requests_per_s,
        },
    }
    if (server := level.server) is not None:
        metrics["service"] = {"batch_size": {"units": "count", "mean": server.running_mean},
                              "queue_size": {"units": "count", "mean": server.waiting_mean}}  # fmt: skip
    model: dict[str, Any] = {"name": results.target.model}
    if results.settings.models:
        model["adapters"] = [{"name": name} for name in results.settings.models]
    load_type = "trace replay" if level.load.arrival == "trace" else LOAD_TYPES.get(level.load.kind, level.load.kind)
    args = {level.load.kind: level.load.value, "api": results.target.api, "prompt_tokens": results.settings.prompt_mean,
            "output_tokens": results.settings.output_mean}  # fmt: skip
    return {
        "version": VERSION,
        "scenario": {
            "description": f"loadgen {results.run.command} {results.run.id}, level {level.load.label}",
            "model": model,
            "load": {"name": "loadgen", "type": load_type, "args": args},
        },
        "metrics": metrics,
        "metadata": {
            "tool": f"loadgen {results.run.tool_version}",
            "started_at": results.run.started_at,
            "level": level.load.label,
            "ttft_from_send": _statistics(level.histograms[Metric.TTFT_SENT], "ms"),
            "trusted": not level.client_bound and level.complete,
        },
    }


def _statistics(histogram: LatencyHistogram, units: str) -> dict[str, Any] | None:
    """A histogram as llm-d's Statistics (ms); None where it holds no sample (the field is then left out)."""
    mean = histogram.mean_us()
    if mean is None:
        return None
    out: dict[str, Any] = {"units": units, "mean": mean / 1000.0}
    if (stddev := histogram.stddev_us()) is not None:
        out["stddev"] = stddev / 1000.0
    out["min"] = (histogram.min_us() or 0) / 1000.0
    for key, p in PERCENTILES.items():
        value = histogram.percentile_us(p)
        out[key] = None if value is None else value / 1000.0
    out["max"] = (histogram.max_us() or 0) / 1000.0
    return out
