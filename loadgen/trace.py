"""Request traces to replay: when each request arrived and how long its prompt and answer were.

Production traffic is neither Poisson nor fixed-length. A trace replays it in
open loop at its recorded times (scaled by ``time_scale``), each request with
its recorded prompt and output lengths. Formats read (detected from the
columns):

- loadgen's own, JSON lines or CSV: ``time_s`` (seconds from any origin),
  ``prompt_tokens``, ``output_tokens``;
- Mooncake (JSON lines): ``timestamp`` in ms, ``input_length``,
  ``output_length`` (``hash_ids`` are read past: prefix reuse is not replayed);
- Azure LLM inference traces (CSV): ``TIMESTAMP`` (a date and time),
  ``ContextTokens``, ``GeneratedTokens``.
"""

from __future__ import annotations

import csv
import heapq
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadgen.errors import UsageError
from loadgen.limits import MAX_TOKENS
from loadgen.textfiles import read_text

MAX_TRACE_REQUESTS = 1_000_000  # a replay holds its schedule in memory
MAX_TRACE_SPAN_S = 30 * 86400.0  # a row 10^15 s after the first once left a replay waiting silently forever


@dataclass(frozen=True, slots=True)
class Trace:
    """Arrival offsets (s from the first request, sorted) with each request's lengths."""

    offsets_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    format: str

    def scaled(self, time_scale: float, limit: int | None = None) -> Trace:
        """Offsets times ``time_scale`` (0.5 replays twice as fast), the first ``limit`` requests."""
        n = len(self.offsets_s) if limit is None else min(limit, len(self.offsets_s))
        return Trace(
            tuple(t * time_scale for t in self.offsets_s[:n]),
            self.prompt_tokens[:n],
            self.output_tokens[:n],
            self.format,
        )

    @property
    def span_s(self) -> float:
        return self.offsets_s[-1] if self.offsets_s else 0.0

    @property
    def mean_rate(self) -> float:
        """Requests per second over the trace (n - 1 gaps in the span)."""
        return (len(self.offsets_s) - 1) / self.span_s if self.span_s > 0 else float(len(self.offsets_s))


# columns per format: (time, prompt, output), and how to turn the time into seconds
_FORMATS: dict[str, tuple[str, str, str]] = {
    "loadgen": ("time_s", "prompt_tokens", "output_tokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
}


def load_trace(path: Path, limit: int | None = None, flag: str = "--trace") -> Trace:
    """Read a trace file; one line naming the file, line and column for anything wrong.

    With ``limit`` (``--requests``) only the ``limit`` earliest requests are
    kept, however long the file: a heap holds them, so a cut of a trace past
    ``MAX_TRACE_REQUESTS`` rows is replayed rather than refused.
    """
    text = read_text(path, flag)
    rows: Iterable[tuple[int, Mapping[str, Any]]]
    rows = _csv_rows(path, text, flag) if path.suffix.lower() == ".csv" else _json_lines(path, text, flag)
    kept: list[tuple[float, int, int, int]] = []  # (-time, -row, prompt, output): a max-heap on time
    fmt = None
    for line, row in rows:
        if fmt is None:
            fmt = _detect(path, row, flag)
        time_key, prompt_key, output_key = _FORMATS[fmt]
        where = f"{flag} {path}:{line}"
        entry = (-_seconds(where, time_key, row.get(time_key), fmt), -line,
                 _tokens(where, prompt_key, row.get(prompt_key)), _tokens(where, output_key, row.get(output_key)))  # fmt: skip
        if limit is None:
            kept.append(entry)
            if len(kept) > MAX_TRACE_REQUESTS:
                raise UsageError(f"{flag} {path}: more than {MAX_TRACE_REQUESTS:,} requests; cut it (--requests)")
        elif len(kept) < min(limit, MAX_TRACE_REQUESTS):
            heapq.heappush(kept, entry)
        else:
            heapq.heappushpop(kept, entry)  # drops the latest of the kept and the new one
    if not kept or fmt is None:
        raise UsageError(f"{flag} {path}: no requests")
    kept.sort(reverse=True)  # earliest first; equal times in file order
    start, (last_time, last_row, _, _) = -kept[0][0], kept[-1]
    if -last_time - start > MAX_TRACE_SPAN_S:
        raise UsageError(
            f"{flag} {path}:{-last_row}: {-last_time - start:,.0f} s after the first request; a replay spans at most "
            f"{MAX_TRACE_SPAN_S / 86400:g} days (cut it with --requests, or fix the row's time)"
        )
    return Trace(
        tuple(-t - start for t, _, _, _ in kept),
        tuple(prompt for _, _, prompt, _ in kept),
        tuple(output for _, _, _, output in kept),
        fmt,
    )


def _csv_rows(path: Path, text: str, flag: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text))
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as exc:  # a field past the csv module's 131,072-character limit, a NUL byte
        raise UsageError(f"{flag} {path}:{reader.line_num}: not a CSV row ({exc})") from None


def _json_lines(path: Path, text: str, flag: str) -> Iterable[tuple[int, Mapping[str, Any]]]:
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise UsageError(f"{flag} {path}:{no}: not a JSON object (JSON lines, or a .csv file)") from None
        if not isinstance(row, dict):
            raise UsageError(f"{flag} {path}:{no}: not a JSON object")
        yield no, row


def _detect(path: Path, row: Mapping[str, Any], flag: str) -> str:
    for fmt, (time_key, prompt_key, output_key) in _FORMATS.items():
        if {time_key, prompt_key, output_key} <= row.keys():
            return fmt
    known = "; ".join(", ".join(cols) for cols in _FORMATS.values())
    raise UsageError(f"{flag} {path}: unknown columns {sorted(row)}; expected one of: {known}")


def _seconds(where: str, key: str, raw: Any, fmt: str) -> float:
    if fmt == "azure":
        try:
            # "2023-11-16 18:15:46.6805900": Python reads at most 6 fractional digits
            head, _, frac = str(raw).strip().partition(".")
            moment = datetime.fromisoformat(head + (f".{frac[:6]}" if frac else ""))
        except ValueError:
            raise UsageError(f"{where}: {key}: expected a date and time, got {raw!r}") from None
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        return (moment - _EPOCH).total_seconds()  # not .timestamp(): that fails before 1970 on some hosts
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {key}: expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise UsageError(f"{where}: {key}: expected a finite number, got {raw!r}")
    return value / 1000.0 if fmt == "mooncake" else value


_EPOCH = datetime(1970, 1, 1)


def _tokens(where: str, key: str, raw: Any) -> int:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {key}: expected a token count, got {raw!r}") from None
    if not (math.isfinite(value) and 1 <= value <= MAX_TOKENS and value == int(value)):
        raise UsageError(f"{where}: {key}: expected a whole number from 1 to {MAX_TOKENS:,}, got {raw!r}")
    return int(value)
