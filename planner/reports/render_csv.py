"""A results file's levels as a table: ``report -o report.csv`` (one row per level) and ``loadgen export``
(also a row per model of a level split over several), latencies in ms."""

from __future__ import annotations

import csv
import io

from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results

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
    "batch",  # pooling APIs (embeddings, rerank): inputs per request, and what the level served
    "inputs_per_s",
    "prompt_tokens_per_s",
)
STATISTICS = ("mean", "p50", "p90", "p95", "p99", "max")
LATENCY_COLUMNS = tuple(f"{m.value}_{s}_ms" for m in Metric for s in STATISTICS)
# a model's row holds its own requests' outcomes and latencies: the level's throughput is not split by model
MODEL_COLUMNS = frozenset({"load_kind", "load_value", "window_s", "completed", "failed", "error_rate",
                           *LATENCY_COLUMNS})  # fmt: skip


FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell that starts so as a formula


def spreadsheet_safe(cell: object) -> object:
    """A text cell that a spreadsheet would run as a formula (a model named ``=cmd|' /C calc'!A0``), quoted
    with a leading apostrophe so it is shown as text; numbers and other text as they are."""
    return f"'{cell}" if isinstance(cell, str) and cell.startswith(FORMULA_LEADS) else cell


def to_csv(results: Results) -> str:
    """One row per level with the summary columns (latencies in ms)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *LATENCY_COLUMNS])
    for lv in results.levels:
        values = level_values(lv)
        writer.writerow(
            ["" if values[c] is None else spreadsheet_safe(values[c]) for c in (*CSV_COLUMNS, *LATENCY_COLUMNS)]
        )
    return buf.getvalue()


def level_table(results: Results) -> list[dict[str, object]]:
    """Every level's row (``model`` None), each followed by a row per model where its requests named several."""
    rows: list[dict[str, object]] = []
    for lv in results.levels:
        rows.append({"level": lv.load.label, "model": None, **level_values(lv)})
        for name in lv.by_model or {}:
            values = level_values(lv.model_view(name))
            rows.append({"level": lv.load.label, "model": name,
                         **{k: v if k in MODEL_COLUMNS else None for k, v in values.items()}})  # fmt: skip
    return rows


def level_values(lv: LevelResult) -> dict[str, object]:
    """The level's summary columns by name (None where it has no value)."""
    s = lv.summary()
    values: dict[str, object] = {
        "load_kind": lv.load.kind,
        "load_value": lv.load.value,
        "window_s": round(lv.window_s, 3),
        "completed": lv.completed,
        "failed": lv.failed,
        "error_rate": lv.error_rate,
        "achieved_concurrency": s["achieved_concurrency"],
        "output_tokens_per_s": s["output_tokens_per_s"],
        "requests_per_s": s["requests_per_s"],
        "offered_per_s": s["offered_per_s"],
        "prompt_tokens_mean": s["prompt_tokens_mean"],
        "output_tokens_mean": s["output_tokens_mean"],
        "tokens_estimated": lv.tokens_estimated,
        "client_bound": lv.client_bound,
        "goodput_ratio": lv.goodput_ratio,
        "batch": lv.load.batch,
        "inputs_per_s": s.get("inputs_per_s"),
        "prompt_tokens_per_s": s.get("prompt_tokens_per_s"),
    }
    for m in Metric:
        stats = s[f"{m.value}_ms"]
        values.update({f"{m.value}_{k}_ms": stats[k] for k in STATISTICS})
    return values
