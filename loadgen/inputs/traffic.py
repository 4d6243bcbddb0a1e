"""Demand for a fleet plan from a file (``plan --traffic``): a rate series, or a trace of arrivals.

- a rate series: CSV with columns ``time_s,qps`` (each row's rate holds until the next row);
- a trace: any file ``run --trace`` reads (loadgen's, Mooncake, Azure), whose arrival times are
  counted per bucket and replayed as they came.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import UsageError
from loadgen.inputs.textfiles import logical_suffix, read_text
from loadgen.inputs.trace import load_trace
from loadgen.limits import MAX_FLEET_RPS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_bucket(text: str) -> float:
    """``--bucket``: seconds, or a number with s, m or h (``60s``, ``5m``, ``1h``)."""
    m = _DURATION.match(text)
    seconds = float(m.group(1)) * _UNIT_S[m.group(2) or "s"] if m else 0.0
    if not seconds > 0:
        raise UsageError(f"--bucket {text!r}: expected a duration above 0, e.g. 60s, 5m or 1h")
    return seconds


@dataclass(frozen=True, slots=True)
class Traffic:
    """A rate series (``rates`` per row time) or a trace's arrival times (``rates`` None)."""

    times_s: tuple[float, ...]
    rates: tuple[float, ...] | None
    source: str


def load_traffic(path: Path) -> Traffic:
    """The traffic in ``path``; one line naming the file, row and column for anything wrong."""
    text = read_text(path, "--traffic")
    try:
        header = next(csv.reader(io.StringIO(text)), []) if logical_suffix(path) == ".csv" else []
    except csv.Error as exc:
        raise UsageError(f"--traffic {path}:1: not CSV this reader takes ({exc})") from None
    if "qps" in (h.strip() for h in header):
        times, rates = _series(path, text)
        return Traffic(tuple(times), tuple(rates), f"{path.name} (a rate series, {len(times):,} rows)")
    trace = load_trace(path, flag="--traffic")
    return Traffic(trace.offsets_s, None, f"{path.name} ({len(trace.offsets_s):,} requests)")


MAX_TIME_S = 1e10  # a series' time: seconds (past three centuries is no traffic log)


def _series(path: Path, text: str) -> tuple[list[float], list[float]]:
    reader = csv.DictReader(io.StringIO(text))
    times: list[float] = []
    rates: list[float] = []
    try:
        for row in reader:
            where = f"--traffic {path}:{reader.line_num}"
            for key, out, low, high in (("time_s", times, -MAX_TIME_S, MAX_TIME_S), ("qps", rates, 0.0, MAX_FLEET_RPS)):
                try:
                    value = float(row.get(key) or "nan")
                except ValueError:
                    value = math.nan
                if not (math.isfinite(value) and low <= value <= high):
                    raise UsageError(
                        f"{where}: {key}: expected a number from {low:g} to {high:g}, got {row.get(key)!r}"
                    )
                out.append(value)
    except csv.Error as exc:
        raise UsageError(f"--traffic {path}:{reader.line_num + 1}: not CSV this reader takes ({exc})") from None
    if not times:
        raise UsageError(f"--traffic {path}: no rows (expected columns time_s,qps)")
    return times, rates
