"""Results from numbers loadgen did not measure: a per-level table, or another tool's result file.

Planning needs per level a load, a few latency percentiles and a throughput; a table from
another tool, a spreadsheet or a vendor's published benchmark has exactly that. Each level
becomes a ``LevelResult`` whose histograms are *synthesised* so that they answer the given
percentiles (and the mean, when given) as the table does: every consumer (plan, report,
compare) then works unchanged. What the numbers cannot say is said: the results carry
``settings.imported``, and the planner marks its answers ``unknown`` instead of ``resolved``
(percentile intervals need the samples).

The table (CSV with a header row, or a JSON list of objects), one row per level:

- ``concurrency`` or ``rate`` (requests/s): the load;
- ``{ttft,tpot,itl,e2e}_{pNN,mean}_ms``: any of them, e.g. ``tpot_p95_ms``, ``itl_p99.9_ms``;
- ``output_tokens_per_s``, ``requests_per_s``: throughput (one of them at least);
- optional: ``running_batch`` (the server's own mean running batch), ``completed`` (requests
  measured), ``duration_s``, ``prompt_tokens``, ``output_tokens`` (means per request).

Other tools' files (each reader checked on real files made here: ``tests/data/vllm_bench``,
``guidellm``, ``aiperf``): vLLM ``bench serve --save-result`` JSON (one level; with
``--save-detailed`` its per-request records become real histograms), GuideLLM's
``benchmarks.json`` (one level per benchmark) and AIPerf's ``profile_export_aiperf.json`` (one
level, the load from ``input_config.loadgen`` or, since 0.13, its profiling phase; its
``inter_token_latency`` is a per-request mean gap, which is loadgen's TPOT).

Nothing is invented: the figures a file prints are carried exactly (``LevelResult.given``),
requests/s and tokens per request are read or derived by a named rule, or the level is refused.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen import __version__
from loadgen.choices import Arrival
from loadgen.errors import UsageError, parse_json
from loadgen.histogram import HistogramConfig, LatencyHistogram
from loadgen.inputs.textfiles import logical_suffix, read_text
from loadgen.level.result import LevelResult
from loadgen.level.server_sample import ServerSample
from loadgen.limits import MAX_CONCURRENCY, MAX_FILE_LEVELS, MAX_RATE_RPS, MAX_TOKENS
from loadgen.load import Load
from loadgen.quantity import Aggregate, Metric, Quantity
from loadgen.results import Results, RunInfo, Target
from loadgen.run_settings import RunSettings

IMPORTED_METRICS = (Metric.TTFT, Metric.TPOT, Metric.ITL, Metric.E2E)
SYNTHESISED_POINTS = 1000  # histogram points per level when the source gives no request count (no rate follows)
LOAD_KEYS = ("concurrency", "rate")
OTHER_KEYS = frozenset(
    {"output_tokens_per_s", "requests_per_s", "running_batch", "completed", "duration_s", "prompt_tokens",
     "output_tokens", "model"}
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedLevel:
    """One level as a table gives it (times in ms)."""

    load: Load
    latencies: Mapping[Quantity, float]
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    running_batch: float | None = None
    completed: int | None = None
    duration_s: float | None = None
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    # the source's own per-request records (ms per metric; ITL pooled), when it keeps them: the
    # histograms are then built from them, not synthesised
    samples: Mapping[Metric, np.ndarray] | None = None


def _check_count(path: Path, n: int, what: str) -> None:
    if n > MAX_FILE_LEVELS:
        raise UsageError(
            f"{path}: {n:,} {what}; a results file holds at most {MAX_FILE_LEVELS:,} levels (split the file)"
        )


def read_levels(path: Path) -> tuple[list[ImportedLevel], str]:
    """The levels in ``path`` and the format recognised (table, vllm-bench, guidellm or aiperf)."""
    text = read_text(path)
    if logical_suffix(path) == ".csv":
        rows = _csv_rows(path, text)
        _check_count(path, len(rows), "rows")
        return [_table_row(row, f"{path}: row {i + 2}") for i, row in enumerate(rows)], "table"
    doc = parse_json(text, f"{path} (not .csv by its suffix)")  # gzip unpacked by read_text
    if isinstance(doc, dict) and "median_ttft_ms" in doc:
        return [_vllm_bench(doc, str(path))], "vllm-bench"
    if isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list):
        _check_count(path, len(doc["benchmarks"]), "benchmarks")
        return [_guidellm(b, f"{path}: benchmarks[{i}]") for i, b in enumerate(doc["benchmarks"])], "guidellm"
    if isinstance(doc, dict) and isinstance(doc.get("time_to_first_token"), dict):
        return [_aiperf(doc, str(path))], "aiperf"
    if isinstance(doc, list) and all(isinstance(r, dict) for r in doc):
        _check_count(path, len(doc), "levels")
        return [_table_row(row, f"{path}: level {i}") for i, row in enumerate(doc)], "table"
    raise UsageError(
        f"{path}: expected a per-level table (CSV, or a JSON list of objects), vLLM bench serve JSON "
        "(median_ttft_ms), GuideLLM benchmarks.json (benchmarks) or AIPerf profile_export_aiperf.json "
        "(time_to_first_token)"
    )


_RAGGED = "\x00ragged"  # DictReader's key for the values past the header's columns


def _csv_rows(path: Path, text: str) -> list[dict[str, Any]]:
    """The CSV's rows as mappings, each as long as the header: a row with more fields, or a field past the
    csv module's limit, is one line naming the row."""
    reader = csv.DictReader(io.StringIO(text), restkey=_RAGGED)
    rows = []
    try:
        for row in reader:
            if _RAGGED in row:
                raise UsageError(
                    f"{path}: row {reader.line_num}: {len(row) - 1 + len(row[_RAGGED])} fields, the header names "
                    f"{len(row) - 1}"
                )
            rows.append(row)
    except csv.Error as exc:
        raise UsageError(f"{path}: row {reader.line_num + 1}: not CSV this reader takes ({exc})") from None
    return rows


def _float(value: int | float) -> float:
    """A JSON number as a float; an integer past a float's range reads as infinite (refused by ``_checked``)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _number(where: str, key: str, value: Any) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        raise UsageError(
            f"{where}: {key}: expected a finite number >= 0, got a number of {len(str(value))} digits"
        ) from None
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {key}: expected a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise UsageError(f"{where}: {key}: expected a finite number >= 0, got {value!r}")
    return number


def _table_row(row: Mapping[str, Any], where: str) -> ImportedLevel:
    loads = [k for k in LOAD_KEYS if _number(where, k, row.get(k)) is not None]
    if len(loads) != 1:
        raise UsageError(f"{where}: give exactly one of concurrency or rate")
    value = _number(where, loads[0], row[loads[0]])
    assert value is not None
    if not value > 0:
        raise UsageError(f"{where}: {loads[0]}: must be > 0")
    if loads[0] == "concurrency":
        load = Load(kind="concurrency", value=value)
    else:
        load = Load(kind="rate", value=value, arrival=Arrival.POISSON, burstiness=1.0)
    latencies: dict[Quantity, float] = {}
    for key, raw in row.items():
        if key in LOAD_KEYS or key in OTHER_KEYS:
            continue
        if not key.endswith("_ms"):
            raise UsageError(f"{where}: {key}: unknown column (latencies end in _ms, e.g. tpot_p95_ms)")
        try:
            quantity = Quantity.parse(key.removesuffix("_ms"))
        except ValueError as exc:
            raise UsageError(f"{where}: {key}: {exc}") from None
        if quantity.metric not in IMPORTED_METRICS or quantity.aggregate is Aggregate.MAX:
            raise UsageError(f"{where}: {key}: importable are ttft, tpot, itl and e2e percentiles and means")
        number = _number(where, key, raw)
        if number is not None:
            latencies[quantity] = number
    completed = _number(where, "completed", row.get("completed"))
    level = ImportedLevel(
        load=load,
        latencies=latencies,
        output_tokens_per_s=_number(where, "output_tokens_per_s", row.get("output_tokens_per_s")),
        requests_per_s=_number(where, "requests_per_s", row.get("requests_per_s")),
        running_batch=_number(where, "running_batch", row.get("running_batch")),
        completed=None if completed is None else int(completed),
        duration_s=_number(where, "duration_s", row.get("duration_s")),
        prompt_tokens=_number(where, "prompt_tokens", row.get("prompt_tokens")),
        output_tokens=_number(where, "output_tokens", row.get("output_tokens")),
    )
    return _checked(level, where)


MAX_LATENCY_MS = HistogramConfig().highest / 1000.0  # what a results file's histograms can hold (one hour)
MAX_IMPORTED_REQUESTS = 10**12  # requests in one level: a count past it is no measurement
#: Each imported number's range, so every product the import forms (requests = rate x window) stays finite.
IMPORT_BOUNDS = {
    "output_tokens_per_s": MAX_RATE_RPS * MAX_TOKENS,
    "requests_per_s": MAX_RATE_RPS,
    "running_batch": float(MAX_CONCURRENCY),
    "duration_s": 366 * 86_400.0,  # a year: longer is no benchmark's window
    "prompt_tokens": float(MAX_TOKENS),
    "output_tokens": float(MAX_TOKENS),
    "completed": float(MAX_IMPORTED_REQUESTS),
}


def _checked(level: ImportedLevel, where: str) -> ImportedLevel:
    """Refuse a level no results file can hold honestly: every reader's numbers pass through here."""
    highest = MAX_CONCURRENCY if level.load.kind == "concurrency" else MAX_RATE_RPS
    if not (math.isfinite(level.load.value) and 0 < level.load.value <= highest):
        raise UsageError(
            f"{where}: the load ({level.load.kind}) must be a finite number in (0, {highest:,.0f}], got {level.load.value}"
        )
    for quantity, value in level.latencies.items():
        if not (math.isfinite(value) and 0 <= value <= MAX_LATENCY_MS):
            raise UsageError(
                f"{where}: {quantity.key}: expected a latency between 0 and {MAX_LATENCY_MS:,.0f} ms, got {value!r}"
            )
    for name, most in IMPORT_BOUNDS.items():
        value = getattr(level, name)
        if value is not None and not (math.isfinite(value) and 0 <= value <= most):
            raise UsageError(f"{where}: {name}: expected a number from 0 to {most:,.0f}, got {value!r}")
    if level.output_tokens_per_s is None and level.requests_per_s is None:
        raise UsageError(f"{where}: give output_tokens_per_s or requests_per_s (the level's throughput)")
    if not any(q.metric == Metric.TPOT or q.metric == Metric.ITL for q in level.latencies):
        raise UsageError(f"{where}: give at least one TPOT or ITL latency (e.g. tpot_p50_ms or itl_p50_ms)")
    e2e = {Quantity(Metric.E2E, aggregate=Aggregate.MEAN), Quantity(Metric.E2E, percentile=50.0)}
    if level.load.kind == "rate" and level.running_batch is None and e2e.isdisjoint(level.latencies):
        raise UsageError(
            f"{where}: an open-loop level needs e2e_mean_ms (or e2e_p50_ms) or running_batch: without them "
            "its requests in flight, the batch axis, are unknown"
        )
    return level


# vLLM's ``benchmark_serving.py`` / ``vllm bench serve --save-result`` names, per metric
_VLLM_METRICS = {"ttft": Metric.TTFT, "tpot": Metric.TPOT, "itl": Metric.ITL, "e2el": Metric.E2E}


def _vllm_bench(doc: Mapping[str, Any], where: str) -> ImportedLevel:
    """One level from vLLM's bench serve result: ``{mean,median,pNN}_{ttft,tpot,itl,e2el}_ms`` and throughputs."""
    concurrency = doc.get("max_concurrency")
    rate = doc.get("request_rate")
    if isinstance(concurrency, int | float) and concurrency > 0:
        load = Load(kind="concurrency", value=_float(concurrency))
    elif isinstance(rate, int | float) and math.isfinite(rate) and rate > 0:
        load = Load(
            kind="rate", value=_float(rate), arrival=Arrival.POISSON, burstiness=_float(doc.get("burstiness") or 1.0)
        )
    else:
        raise UsageError(
            f"{where}: neither max_concurrency nor a finite request_rate: the load of this run is unknown "
            "(a run with request_rate inf and no max_concurrency sends every request at once)"
        )
    latencies: dict[Quantity, float] = {}
    for key, raw in doc.items():
        stat, _, rest = key.partition("_")
        name = rest.removesuffix("_ms")
        if name not in _VLLM_METRICS or not rest.endswith("_ms") or not isinstance(raw, int | float):
            continue
        metric = _VLLM_METRICS[name]
        if stat == "mean":
            latencies[Quantity(metric, aggregate=Aggregate.MEAN)] = float(raw)
        elif stat == "median":
            latencies[Quantity(metric, percentile=50.0)] = float(raw)
        elif stat.startswith("p"):
            try:
                latencies[Quantity.parse(f"{metric.value}_{stat}")] = float(raw)
            except ValueError:
                continue
    completed = doc.get("completed")
    total_input, total_output = doc.get("total_input_tokens"), doc.get("total_output_tokens")
    n = completed if isinstance(completed, int) and completed > 0 else None
    level = ImportedLevel(
        load=load,
        latencies=latencies,
        output_tokens_per_s=_number(where, "output_throughput", doc.get("output_throughput")),
        requests_per_s=_number(where, "request_throughput", doc.get("request_throughput")),
        completed=n,
        duration_s=_number(where, "duration", doc.get("duration")),
        prompt_tokens=total_input / n if n and isinstance(total_input, int | float) else None,
        output_tokens=total_output / n if n and isinstance(total_output, int | float) else None,
        samples=_vllm_requests(doc, where),
    )
    return _checked(level, where)


def _vllm_requests(doc: Mapping[str, Any], where: str) -> dict[Metric, np.ndarray] | None:
    """The per-request records ``--save-detailed`` keeps (seconds), as ms per metric; successful requests only.

    vLLM's TPOT is ``(latency - ttft) / (output_len - 1)`` per request with at least two tokens,
    loadgen's definition; its ``ttft`` is from the request's send (a closed loop's TTFT).
    """
    keys = ("ttfts", "latencies", "output_lens", "itls", "errors")
    columns = [doc.get(k) for k in keys]
    if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns if isinstance(c, list)}) != 1:
        return None
    ttfts, latencies, outs, itls, errors = columns
    assert ttfts is not None and latencies is not None and outs is not None and itls is not None and errors is not None
    ok = [i for i, e in enumerate(errors) if not e]
    try:
        ttft = np.array([float(ttfts[i]) for i in ok]) * 1000.0
        e2e = np.array([float(latencies[i]) for i in ok]) * 1000.0
        out = np.array([int(outs[i]) for i in ok], dtype=np.int64)
        gaps = np.array([float(g) for i in ok for g in itls[i]]) * 1000.0
    except (TypeError, ValueError, OverflowError):  # OverflowError: an output length of inf or past int64
        raise UsageError(
            f"{where}: per-request records (ttfts, latencies, output_lens, itls): expected finite numbers"
        ) from None
    if not all(np.isfinite(a).all() and (a >= 0).all() and (a <= MAX_LATENCY_MS).all() for a in (ttft, e2e, gaps)):
        raise UsageError(
            f"{where}: per-request records hold a time that is negative, not finite or past "
            f"{MAX_LATENCY_MS:,.0f} ms (what a histogram holds)"
        )
    many = out >= 2
    if (e2e[many] < ttft[many]).any():
        raise UsageError(f"{where}: per-request records hold a latency shorter than its TTFT")
    tpot = (e2e[many] - ttft[many]) / (out[many] - 1)
    return {Metric.TTFT: ttft, Metric.TTFT_SENT: ttft, Metric.E2E: e2e, Metric.TPOT: tpot, Metric.ITL: gaps}


def _stat_quantities(metric: Metric, stats: Mapping[str, Any]) -> dict[Quantity, float]:
    """``{mean|avg|median|pNN: ms}`` (GuideLLM nests percentiles under ``percentiles``) as quantities."""
    flat = {**stats, **(stats.get("percentiles") or {})} if isinstance(stats.get("percentiles"), dict) else stats
    out: dict[Quantity, float] = {}
    for key, raw in flat.items():
        if not isinstance(raw, int | float) or isinstance(raw, bool):
            continue
        if key in ("mean", "avg"):
            out[Quantity(metric, aggregate=Aggregate.MEAN)] = float(raw)
        elif key == "median":
            out[Quantity(metric, percentile=50.0)] = float(raw)
        elif key.startswith("p") and key[1:].replace(".", "", 1).isdigit():
            try:
                out[Quantity.parse(f"{metric.value}_{key}")] = float(raw)
            except ValueError:
                continue
    return out


def _count(where: str, key: str, value: float | None) -> int | None:
    """A request count (None: absent or zero), refused by ``_number``'s rule when not finite or below zero."""
    number = _number(where, key, value)
    return int(number) if number else None


def _number_at(doc: Mapping[str, Any], *path: str) -> float | None:
    value: Any = doc
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    if isinstance(value, Mapping):  # AIPerf scalars are {"avg": v}; GuideLLM's {"successful": {"mean": v}}
        value = value.get("avg", value.get("mean"))
    return _float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _guidellm(bench: Any, where: str) -> ImportedLevel:
    """One GuideLLM benchmark: metrics ``*_ms`` with ``successful`` stats; the load from its strategy."""
    if not isinstance(bench, Mapping) or not isinstance(bench.get("metrics"), Mapping):
        raise UsageError(f"{where}: expected an object with 'metrics'")
    metrics = bench["metrics"]
    config = bench.get("config") or bench.get("args") or {}
    strategy = config.get("strategy") if isinstance(config, Mapping) else None
    strategy = strategy if isinstance(strategy, Mapping) else (config if isinstance(config, Mapping) else {})
    streams = strategy.get("streams") or strategy.get("max_concurrency")
    rate = strategy.get("rate")
    kind = str(strategy.get("type_", strategy.get("type", "")))
    if isinstance(streams, int) and streams > 0:
        load = Load(kind="concurrency", value=_float(streams))
    elif kind == "synchronous":
        load = Load(kind="concurrency", value=1.0)
    elif isinstance(rate, int | float) and rate > 0:
        load = Load(
            kind="rate",
            value=_float(rate),
            arrival=Arrival.POISSON if kind == "poisson" else Arrival.CONSTANT,
            burstiness=1.0,
        )
    else:
        raise UsageError(f"{where}: no concurrency (strategy streams) or rate in its config: the load is unknown")
    latencies: dict[Quantity, float] = {}
    names = {"time_to_first_token_ms": Metric.TTFT, "time_per_output_token_ms": Metric.TPOT,
             "inter_token_latency_ms": Metric.ITL, "request_latency": Metric.E2E}  # fmt: skip
    for name, metric in names.items():
        block = metrics.get(name)
        stats = block.get("successful", block) if isinstance(block, Mapping) else None
        if isinstance(stats, Mapping):
            found = _stat_quantities(metric, stats)
            if name == "request_latency":  # GuideLLM writes it in seconds
                found = {q: v * 1000.0 for q, v in found.items()}
            latencies.update(found)
    completed = _number_at(metrics, "request_totals", "successful")
    level = ImportedLevel(
        load=load,
        latencies=latencies,
        output_tokens_per_s=_number_at(metrics, "output_tokens_per_second", "successful"),
        requests_per_s=_number_at(metrics, "requests_per_second", "successful"),
        completed=_count(where, "request_totals.successful", completed),
        duration_s=_number_at(bench, "duration"),
        prompt_tokens=_number_at(metrics, "prompt_token_count", "successful"),
        output_tokens=_number_at(metrics, "output_token_count", "successful"),
    )
    return _checked(level, where)


def _aiperf(doc: Mapping[str, Any], where: str) -> ImportedLevel:
    """AIPerf's summary: top-level metric blocks ``{unit, avg, pNN}``; the load from its input config."""
    config: Mapping[str, Any] = doc["input_config"] if isinstance(doc.get("input_config"), Mapping) else {}
    loadgen: Mapping[str, Any] = config["loadgen"] if isinstance(config.get("loadgen"), Mapping) else {}
    # AIPerf 0.13 and later: the load is the profiling phase's (``phases: [{kind: profiling, concurrency: 4}]``)
    listed = config.get("phases")
    phases = (
        [p for p in listed if isinstance(p, Mapping) and p.get("kind") == "profiling"]
        if isinstance(listed, list)
        else []
    )
    phase: Mapping[str, Any] = phases[0] if len(phases) == 1 else {}
    concurrency = loadgen.get("concurrency", phase.get("concurrency", doc.get("concurrency")))
    rate = loadgen.get("request_rate", phase.get("request_rate", doc.get("request_rate")))
    if isinstance(concurrency, int) and concurrency > 0:
        load = Load(kind="concurrency", value=_float(concurrency))
    elif isinstance(rate, int | float) and rate > 0:
        load = Load(kind="rate", value=_float(rate), arrival=Arrival.POISSON, burstiness=1.0)
    else:
        raise UsageError(
            f"{where}: no concurrency or request_rate in input_config (loadgen, or the profiling phase): "
            "the load is unknown"
        )
    latencies: dict[Quantity, float] = {}
    # AIPerf's inter_token_latency is (latency - TTFT) / (tokens - 1) per request: loadgen's TPOT
    names = {"time_to_first_token": Metric.TTFT, "inter_token_latency": Metric.TPOT, "request_latency": Metric.E2E}
    for name, metric in names.items():
        block = doc.get(name)
        if isinstance(block, Mapping):
            scale = 1000.0 if block.get("unit") in ("s", "sec", "seconds") else 1.0
            latencies.update({q: v * scale for q, v in _stat_quantities(metric, block).items()})
    count = _number_at(doc, "request_count")
    level = ImportedLevel(
        load=load,
        latencies=latencies,
        output_tokens_per_s=_number_at(doc, "output_token_throughput"),
        requests_per_s=_number_at(doc, "request_throughput"),
        completed=_count(where, "request_count", count),
        prompt_tokens=_number_at(doc, "input_sequence_length"),
        output_tokens=_number_at(doc, "output_sequence_length"),
    )
    return _checked(level, where)


def synthesise(anchors: Mapping[float, float], mean: float | None, n: int) -> np.ndarray:
    """``n`` values (ms) whose percentiles are ``anchors`` ({percentile: value}) and whose mean is ``mean``.

    The quantile function is piecewise linear through the anchors, flat above
    the highest one; its value at 0 is free, and is chosen so that the mean
    comes out as given (clamped to [0, the lowest anchor] when it cannot).
    """
    if not anchors:
        return np.full(n, mean if mean is not None else 0.0)
    qs = sorted(anchors)
    vs = list(np.maximum.accumulate([anchors[q] for q in qs]))  # a table's rounding must not invert the order
    xs, ys = [q / 100.0 for q in qs] + [1.0], [*vs, vs[-1]]
    lowest = ys[0]
    bottom = lowest
    if mean is not None and xs[0] > 0:
        rest = sum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(len(xs) - 1))
        bottom = min(max(2 * (mean - rest) / xs[0] - lowest, 0.0), lowest)
    if xs[0] > 0:
        xs, ys = [0.0, *xs], [bottom, *ys]
    positions = (np.arange(n) + 0.5) / n
    values: np.ndarray = np.interp(positions, xs, ys)
    return values


@dataclass(frozen=True, slots=True)
class PerRequest:
    """Tokens per request stated outside the file (``loadgen import --output-tokens/--prompt-tokens``)."""

    output_tokens: float | None = None
    prompt_tokens: float | None = None


def to_results(
    levels: Sequence[ImportedLevel], *, source: str, fmt: str, model: str, per_request: PerRequest = PerRequest()
) -> Results:
    """A results file from imported levels, marked ``settings.imported``; each derived figure named in the notes.

    Raises UsageError naming the level and the missing column when a level's requests/s can be
    neither read nor derived: nothing is assumed.
    """
    out, notes = [], []
    for lv in sorted(levels, key=lambda level: level.load.value):
        try:
            level, derived = _level(_with_per_request(lv, per_request))
        except UsageError as exc:
            raise UsageError(f"{source}: {exc}") from None
        out.append(level)
        notes += [f"{level.load.label}: {a}" for a in derived]
    settings = RunSettings(
        imported={"source": source, "format": fmt, "note": "percentile intervals unknown: histograms synthesised"},
        metric_convention="unknown",
    )
    run = RunInfo(
        id="imported",
        started_at="",
        tool_version=__version__,
        python=platform.python_version(),
        platform=platform.platform(),
        cpu_count=None,
        command="import",
    )
    return Results(
        run=run,
        target=Target(source, model, "unknown"),
        settings=settings,
        levels=tuple(out),
        complete=True,
        notes=tuple(notes),
    )


def _with_per_request(lv: ImportedLevel, per_request: PerRequest) -> ImportedLevel:
    """The file's own tokens per request win; a flag fills only what the file leaves out."""
    return dataclasses.replace(
        lv,
        output_tokens=lv.output_tokens if lv.output_tokens is not None else per_request.output_tokens,
        prompt_tokens=lv.prompt_tokens if lv.prompt_tokens is not None else per_request.prompt_tokens,
    )


def _mean_of(lv: ImportedLevel, metric: Metric) -> float | None:
    return lv.latencies.get(Quantity(metric, aggregate=Aggregate.MEAN))


def _derived_rates(lv: ImportedLevel) -> tuple[float, float | None, list[str]]:
    """Requests/s and output tokens per request: read, or derived by a named rule, or refused.

    Requests/s: given; else output tok/s over output tokens per request (usage counts); else, in a
    closed loop, concurrency over mean E2E (Little's law). Tokens per request: given; else tok/s over
    requests/s.
    """
    notes = []
    rps, out_mean = lv.requests_per_s, lv.output_tokens
    if rps is None and lv.output_tokens_per_s is not None and out_mean:
        rps = lv.output_tokens_per_s / out_mean
        notes.append(f"requests/s {rps:.4g} = output tok/s / output tokens per request")
    e2e = _mean_of(lv, Metric.E2E)
    if rps is None and lv.load.kind == "concurrency" and e2e:
        rps = lv.load.value / (e2e / 1000.0)
        notes.append(f"requests/s {rps:.4g} = concurrency / mean E2E (Little's law)")
    if rps is None or rps <= 0:
        raise UsageError(
            f"level {lv.load.label}: requests/s is neither given nor derivable: give requests_per_s, e2e_mean_ms, "
            "or output tokens per request (an output_tokens column, or --output-tokens)"
        )
    if out_mean is None and lv.output_tokens_per_s is not None:
        out_mean = lv.output_tokens_per_s / rps
        notes.append(f"output tokens per request {out_mean:.4g} = output tok/s / requests/s")
    return rps, out_mean, notes


def _level(lv: ImportedLevel) -> tuple[LevelResult, list[str]]:
    rps, out_mean, notes = _derived_rates(lv)
    latencies = dict(lv.latencies)
    tpot_mean, itl_mean = (
        Quantity(Metric.TPOT, aggregate=Aggregate.MEAN),
        Quantity(Metric.ITL, aggregate=Aggregate.MEAN),
    )
    if not any(q.metric == Metric.TPOT for q in latencies) and itl_mean in latencies:
        # a request's TPOT is the mean of its gaps; pooled over requests of one length, the same mean
        latencies[tpot_mean] = latencies[itl_mean]
        notes.append("TPOT mean = ITL mean (one token per event; exact when requests share one output length)")
    completed = lv.completed
    if completed is None:
        completed = SYNTHESISED_POINTS
        notes.append(f"request count not given: each histogram holds {SYNTHESISED_POINTS} synthesised points")
    window = lv.duration_s if lv.duration_s is not None else completed / rps
    tok_s = lv.output_tokens_per_s if lv.output_tokens_per_s is not None else (out_mean or 0.0) * rps
    completed = max(1, round(rps * window))
    output_tokens = round((out_mean or 0.0) * completed)
    histograms = {metric: LatencyHistogram() for metric in Metric}
    if lv.samples is not None:
        for metric, values in lv.samples.items():
            histograms[metric].record_many_s(values / 1000.0)
        notes.append(f"histograms from the file's {len(lv.samples[Metric.E2E])} per-request records")
    else:
        for metric in IMPORTED_METRICS:
            anchors = {q.percentile: v for q, v in latencies.items() if q.metric == metric and q.percentile is not None}
            mean = next((v for q, v in latencies.items() if q.metric == metric and q.aggregate is not None), None)
            if anchors or mean is not None:
                n = completed if metric != Metric.ITL else max(completed, completed * max(int(out_mean or 2) - 1, 1))
                histograms[metric].record_many_s(synthesise(anchors, mean, min(n, 200_000)) / 1000.0)
    for histogram in histograms.values():
        histogram.freeze()  # recorded buckets only: a 3,000-row table once held 4 GB of dense arrays
    concurrency = lv.load.value if lv.load.kind == "concurrency" else _littles(lv, rps)
    server = (
        ServerSample(source="imported", samples=1, running_mean=lv.running_batch, waiting_mean=None)
        if lv.running_batch is not None
        else None
    )
    prompt = round((lv.prompt_tokens or 0.0) * completed)
    level = LevelResult(
        load=lv.load,
        window_s=window,
        completed=completed,
        errors={},
        output_tokens=output_tokens,
        window_output_tokens=float(tok_s * window),
        prompt_tokens=prompt,
        prompt_tokens_reported=completed if lv.prompt_tokens is not None else 0,
        tokens_estimated=False,
        achieved_concurrency=concurrency,
        histograms=histograms,
        server=server,
        offered=completed,
        given={q.key: v for q, v in latencies.items()},
        synthesised=lv.samples is None,
    )
    return level, notes


def _littles(lv: ImportedLevel, rps: float) -> float:
    """Open loop: requests in flight = arrivals/s x mean E2E (the given mean, else the median)."""
    e2e = lv.latencies.get(Quantity(Metric.E2E, aggregate=Aggregate.MEAN)) or lv.latencies.get(
        Quantity(Metric.E2E, percentile=50.0)
    )
    return rps * e2e / 1000.0 if e2e else 0.0
