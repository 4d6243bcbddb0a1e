"""A results file's levels as CSV (``report -o report.csv``): one row per level, latencies in ms."""

from __future__ import annotations

import csv
import io

from loadgen.results import LevelResult, Metric, Results

CSV_COLUMNS = (
    "load_kind",
    "load_value",
    "window_s",
    "completed",
    "failed",
    "error_rate",
    "achieved_concurrency",
    "output_tokens_per_s",
    "requests_per_s",
    "offered_per_s",
    "prompt_tokens_mean",
    "output_tokens_mean",
    "tokens_estimated",
    "client_bound",
    "goodput_ratio",
)


def to_csv(results: Results) -> str:
    """One row per level with the summary columns (latencies in ms)."""
    latency_cols = [f"{m.value}_{s}_ms" for m in Metric for s in ("mean", "p50", "p90", "p95", "p99", "max")]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *latency_cols])
    for lv in results.levels:
        writer.writerow(_csv_row(lv))
    return buf.getvalue()


def _csv_row(lv: LevelResult) -> list[object]:
    s = lv.summary()
    row: list[object] = [
        lv.load.kind,
        lv.load.value,
        round(lv.window_s, 3),
        lv.completed,
        lv.failed,
        lv.error_rate,
        s["achieved_concurrency"],
        s["output_tokens_per_s"],
        s["requests_per_s"],
        s["offered_per_s"],
        s["prompt_tokens_mean"],
        s["output_tokens_mean"],
        lv.tokens_estimated,
        lv.client_bound,
        lv.goodput_ratio,
    ]
    for m in Metric:
        stats = s[f"{m.value}_ms"]
        row += [stats[k] for k in ("mean", "p50", "p90", "p95", "p99", "max")]
    return ["" if v is None else v for v in row]
