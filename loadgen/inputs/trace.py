"""Request traces to replay: when each request arrived and how long its prompt and answer were.

Production traffic is neither Poisson nor fixed-length. A trace replays it in
open loop at its recorded times (scaled by ``time_scale``), each request with
its recorded prompt and output lengths. Formats read (detected from the
columns):

- loadgen's own, JSON lines or CSV: ``time_s`` (seconds from any origin),
  ``prompt_tokens``, ``output_tokens``;
- Mooncake (JSON lines): ``timestamp`` in ms, ``input_length``,
  ``output_length``, and ``hash_ids`` where the trace has them: the prompt's
  blocks (``block_tokens`` each, 512 in Mooncake's traces), two requests with
  the same id at the same place sharing that block and every one before it. A
  replay sends prompts that share text exactly where the trace shares blocks;
  ``implied_prefix_share`` is how much of the prompts a cache could serve;
- Azure LLM inference traces (CSV): ``TIMESTAMP`` (a date and time),
  ``ContextTokens``, ``GeneratedTokens``.
"""

from __future__ import annotations

import csv
import heapq
import io
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.errors import UsageError, parse_json
from loadgen.inputs.textfiles import logical_suffix, read_text
from loadgen.limits import MAX_TOKENS

MAX_TRACE_REQUESTS = 1_000_000  # a replay holds its schedule in memory
MAX_TRACE_SPAN_S = 30 * 86400.0  # a row 10^15 s after the first once left a replay waiting silently forever


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """Arrival offsets (s from the first request, sorted) with each request's lengths."""

    offsets_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    format: str
    hash_ids: tuple[tuple[int, ...], ...] | None = None  # each request's prompt blocks, where the trace names them

    def scaled(self, time_scale: float, limit: int | None = None) -> Trace:
        """Offsets times ``time_scale`` (0.5 replays twice as fast), the first ``limit`` requests."""
        n = len(self.offsets_s) if limit is None else min(limit, len(self.offsets_s))
        return Trace(
            offsets_s=tuple(t * time_scale for t in self.offsets_s[:n]),
            prompt_tokens=self.prompt_tokens[:n],
            output_tokens=self.output_tokens[:n],
            format=self.format,
            hash_ids=self.hash_ids[:n] if self.hash_ids is not None else None,
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


# (line, format, time, prompt tokens, output tokens, hash ids or None) as the file wrote them
Row = tuple[int, str, Any, Any, Any, Any]


def load_trace(path: Path, limit: int | None = None, flag: str = "--trace") -> Trace:
    """Read a trace file; one line naming the file, line and column for anything wrong.

    With ``limit`` (``--requests``) only the ``limit`` earliest requests are
    kept, however long the file: a heap holds them, so a cut of a trace past
    ``MAX_TRACE_REQUESTS`` rows is replayed rather than refused.
    """
    text = read_text(path, flag)
    is_csv = logical_suffix(path) == ".csv"
    if is_csv and (trace := _clean_numeric_csv(text, limit)) is not None:
        return trace
    rows = _csv_rows(path, text, flag) if is_csv else _json_lines(path, text, flag)
    # (-time, -row, prompt, output, hash ids): a max-heap on time
    kept: list[tuple[float, int, int, int, tuple[int, ...] | None]] = []
    fmt = None
    room = MAX_TRACE_REQUESTS if limit is None else min(limit, MAX_TRACE_REQUESTS)
    push, pushpop = heapq.heappush, heapq.heappushpop
    for line, fmt, raw_time, raw_prompt, raw_output, raw_hashes in rows:
        try:
            entry = (-_seconds(raw_time, fmt), -line, _tokens(raw_prompt, 1), _tokens(raw_output, 2),
                     _hash_ids(raw_hashes))  # fmt: skip
        except _BadValue as bad:
            key = (*_FORMATS[fmt], "hash_ids")[bad.column]
            shown = bad.raw if len(repr(bad.raw)) <= 80 else f"{repr(bad.raw)[:77]}..."
            raise UsageError(f"{flag} {path}:{line}: {key}: {bad.expected}, got {shown!r}") from None
        if limit is None:
            if len(kept) == room:
                raise UsageError(f"{flag} {path}: more than {MAX_TRACE_REQUESTS:,} requests; cut it (--requests)")
            kept.append(entry)
        elif len(kept) < room:
            push(kept, entry)
        else:
            pushpop(kept, entry)  # drops the latest of the kept and the new one
    if not kept or fmt is None:
        raise UsageError(f"{flag} {path}: no requests")
    kept.sort(reverse=True)  # earliest first; equal times in file order
    start, (last_time, last_row, *_) = -kept[0][0], kept[-1]
    if -last_time - start > MAX_TRACE_SPAN_S:
        raise UsageError(
            f"{flag} {path}:{-last_row}: {-last_time - start:,.0f} s after the first request; a replay spans at most "
            f"{MAX_TRACE_SPAN_S / 86400:g} days (cut it with --requests, or fix the row's time)"
        )
    named = any(entry[4] is not None for entry in kept)
    return Trace(
        offsets_s=tuple(-entry[0] - start for entry in kept),
        prompt_tokens=tuple(entry[2] for entry in kept),
        output_tokens=tuple(entry[3] for entry in kept),
        format=fmt,
        hash_ids=tuple(entry[4] or () for entry in kept) if named else None,
    )


def implied_prefix_share(trace: Trace, block_tokens: int) -> float | None:
    """The share of the trace's prompt tokens a prefix cache that forgets nothing could serve: each request's
    leading blocks whose ids came earlier in the trace (an id names its block and every block before it),
    a partial last block counting the tokens it holds. None for a trace without ``hash_ids``."""
    if trace.hash_ids is None:
        return None
    seen: set[int] = set()
    hit = 0
    for prompt, blocks in zip(trace.prompt_tokens, trace.hash_ids, strict=True):
        leading = True
        for i, block in enumerate(blocks):
            if leading and block in seen:
                hit += max(0, min(block_tokens, prompt - i * block_tokens))
            else:
                leading = False
            seen.add(block)
    return hit / sum(trace.prompt_tokens)


def _clean_numeric_csv(text: str, limit: int | None) -> Trace | None:
    """A CSV trace with numeric times, parsed by numpy's C reader: a million rows in under a second, where
    row by row in Python took seven. None for anything not clean (a value ``float()`` reads and numpy does
    not, a short row, a length out of range, a date column, too many rows, too long a span): the row reader
    then reads the file and names the first thing wrong, so both paths accept and refuse the same files."""
    header_rows = csv.reader(io.StringIO(text))
    try:
        positions = {name: i for i, name in enumerate(next(header_rows, []))}
        header_lines = header_rows.line_num
        has_data = any(header_rows)  # without a data row the row reader says so
    except csv.Error:
        return None
    fmt = next((f for f, keys in _FORMATS.items() if set(keys) <= positions.keys()), None)
    if fmt is None or fmt == "azure" or not has_data:
        return None
    columns = [positions[key] for key in _FORMATS[fmt]]
    try:
        table = np.loadtxt(io.StringIO(text), delimiter=",", quotechar='"', comments=None, ndmin=2,
                           skiprows=header_lines, usecols=columns, dtype=np.float64)  # fmt: skip
    except (ValueError, csv.Error):
        return None
    times, prompts, outputs = table.T
    lengths = table[:, 1:]
    if not (
        0 < len(times) <= (MAX_TRACE_REQUESTS if limit is None else math.inf)
        and np.isfinite(times).all()
        and ((lengths >= 1) & (lengths <= MAX_TOKENS) & (lengths == np.floor(lengths))).all()
    ):
        return None
    order = np.argsort(times, kind="stable")[: MAX_TRACE_REQUESTS if limit is None else min(limit, MAX_TRACE_REQUESTS)]
    kept = times[order] / (1000.0 if fmt == "mooncake" else 1.0)
    offsets = kept - kept[0]
    if offsets[-1] > MAX_TRACE_SPAN_S:
        return None
    return Trace(offsets_s=tuple(offsets.tolist()), prompt_tokens=tuple(prompts[order].astype(np.int64).tolist()),
                 output_tokens=tuple(outputs[order].astype(np.int64).tolist()), format=fmt)  # fmt: skip


def _csv_rows(path: Path, text: str, flag: str) -> Iterator[Row]:
    """Each data row's three columns, by position (as ``csv.DictReader`` would name them: a later column of
    the same name wins, a short row reads None, a blank line is skipped), with no dict per row."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
        if header is None:
            return
        positions = {name: i for i, name in enumerate(header)}
        fmt = ""
        t = p = o = 0
        for row in reader:
            if not row:
                continue
            if not fmt:
                fmt = _detect(path, positions, flag)
                t, p, o = (positions[key] for key in _FORMATS[fmt])
            width = len(row)
            yield (reader.line_num, fmt, row[t] if t < width else None, row[p] if p < width else None,
                   row[o] if o < width else None, None)  # fmt: skip
    except csv.Error as exc:  # a field past the csv module's 131,072-character limit, a NUL byte
        raise UsageError(f"{flag} {path}:{reader.line_num}: not a CSV row ({exc})") from None


def _json_lines(path: Path, text: str, flag: str) -> Iterator[Row]:
    fmt = ""
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = parse_json(line, f"{flag} {path}:{no} (JSON lines, or a .csv file)")
        if not isinstance(row, dict):
            raise UsageError(f"{flag} {path}:{no}: not a JSON object")
        fmt = fmt or _detect(path, row, flag)
        time_key, prompt_key, output_key = _FORMATS[fmt]
        yield no, fmt, row.get(time_key), row.get(prompt_key), row.get(output_key), row.get("hash_ids")


def _detect(path: Path, columns: Mapping[str, Any], flag: str) -> str:
    for fmt, (time_key, prompt_key, output_key) in _FORMATS.items():
        if {time_key, prompt_key, output_key} <= columns.keys():
            return fmt
    known = "; ".join(", ".join(cols) for cols in _FORMATS.values())
    raise UsageError(f"{flag} {path}: unknown columns {sorted(columns)}; expected one of: {known}")


class _BadValue(Exception):
    """A value that is not what its column holds; the reader names the file, line and column."""

    def __init__(self, column: int, expected: str, raw: Any) -> None:
        super().__init__(expected)
        self.column, self.expected, self.raw = column, expected, raw


def _seconds(raw: Any, fmt: str) -> float:
    if fmt == "azure":
        try:
            # "2023-11-16 18:15:46.6805900": Python reads at most 6 fractional digits
            head, _, frac = str(raw).strip().partition(".")
            moment = datetime.fromisoformat(head + (f".{frac[:6]}" if frac else ""))
        except ValueError:
            raise _BadValue(0, "expected a date and time", raw) from None
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        return (moment - _EPOCH).total_seconds()  # not .timestamp(): that fails before 1970 on some hosts
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise _BadValue(0, "expected a number", raw) from None
    if not math.isfinite(value):
        raise _BadValue(0, "expected a finite number", raw)
    return value / 1000.0 if fmt == "mooncake" else value


_EPOCH = datetime(1970, 1, 1)


MAX_HASH_ID = 2**63 - 1


def _hash_ids(raw: Any) -> tuple[int, ...] | None:
    """A request's block ids (whole numbers, at most a prompt's worth), or None where the row has none."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_TOKENS:
        raise _BadValue(3, f"expected a list of at most {MAX_TOKENS:,} block ids", raw)
    if not all(type(h) is int and 0 <= h <= MAX_HASH_ID for h in raw):
        raise _BadValue(3, "expected whole numbers from 0 to 2**63-1", raw)
    return tuple(raw)


def _tokens(raw: Any, column: int) -> int:
    if type(raw) is int or (type(raw) is str and raw.isascii() and raw.isdigit()):
        value = int(raw)  # the usual case, read without a float: 10**400 is out of range, not an overflow
    else:
        try:
            number = float(raw)
        except (TypeError, ValueError, OverflowError):
            raise _BadValue(column, "expected a token count", raw) from None
        value = int(number) if math.isfinite(number) and number == int(number) else 0  # 0: refused below
    if not 1 <= value <= MAX_TOKENS:
        raise _BadValue(column, f"expected a whole number from 1 to {MAX_TOKENS:,}", raw)
    return value
