"""A ``--records`` file read back: each level's completed requests, as the planner's replay check takes them.

``run --records`` writes one JSON line per request (``loadgen.wire.records``). ``plan --validate``
replays a level's requests through the plan's engine (``planner.capacity.validation``), so it needs, for each
request that completed, when it was sent, its prompt and output lengths (the server's usage) and the
TTFT and E2E its client measured. A failed or cut request is no sample of the served latency; one
whose server sent no usage has no prompt length to replay: both are counted, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from loadgen.errors import LoadgenError, MissingResultsFile
from loadgen.histogram import HistogramConfig
from loadgen.limits import MAX_TOKENS


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredLevel:
    """One level's completed requests (seconds since the run's clock origin, tokens, milliseconds)."""

    label: str
    sent_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    skipped: int  # completed, but without the server's prompt length
    send_lag_ms: np.ndarray  # how late each was sent against its schedule (t_sent - max(t_intended, t_slot))


MAX_RUN_S = 366 * 86_400.0  # a record's times are seconds from its run's start: a year at most
MAX_REQUEST_S = HistogramConfig().highest / 1e6  # the longest request a results file's histograms hold


def read_measured(path: Path) -> list[MeasuredLevel]:
    """The levels of a records file, in the order they first appear; a broken line is a one-line error."""
    if not path.is_file():
        raise MissingResultsFile(f"--validate {path}: no such records file")
    rows: dict[str, list[tuple[float, float, int, float, float, float]]] = {}
    skipped: dict[str, int] = {}
    try:
        with path.open("rb") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                completed, unsized = _row(path, number, line)
                if completed is None:
                    continue
                label, request = completed
                skipped[label] = skipped.get(label, 0) + unsized
                kept = rows.setdefault(label, [])
                if request is not None:
                    kept.append(request)
    except OSError as exc:
        raise LoadgenError(f"--validate {path}: cannot read ({exc.strerror})") from None
    levels = []
    for label, requests in rows.items():
        table = np.array(requests, dtype=np.float64).reshape(-1, 6)
        levels.append(
            MeasuredLevel(
                label=label,
                sent_s=table[:, 0],
                prompt_tokens=table[:, 1],
                output_tokens=table[:, 2].astype(np.int64),
                ttft_ms=(table[:, 3] - table[:, 0]) * 1000.0,
                e2e_ms=(table[:, 4] - table[:, 0]) * 1000.0,
                skipped=skipped[label],
                send_lag_ms=table[:, 5] * 1000.0,
            )
        )
    if not levels:
        raise LoadgenError(f"--validate {path}: no completed request in the file")
    return levels


def _row(
    path: Path, number: int, line: bytes
) -> tuple[tuple[str, tuple[float, float, int, float, float, float] | None] | None, int]:
    """((level label, the request's values or None when it has no prompt length), skipped) for a completed
    request; (None, 0) for one that failed or was cut."""
    where = f"--validate {path}, line {number}"
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise LoadgenError(f"{where}: not a JSON record (a file written by run --records)") from None
    if not isinstance(record, dict):
        raise LoadgenError(f"{where}: not a JSON record (a file written by run --records)")
    if record.get("error") is not None or record.get("cut"):
        return None, 0
    label = str(record.get("load") or "run")
    try:
        sent, first, last = (float(record[k]) for k in ("t_sent", "t_first", "t_last"))
        output = int(record["output_tokens"])
        prompt = record["prompt_tokens"]
    except (KeyError, TypeError, ValueError):
        raise LoadgenError(
            f"{where}: a completed request needs t_sent, t_first, t_last, output_tokens and prompt_tokens"
        ) from None
    if prompt is None:
        return (label, None), 1
    if not (np.isfinite([sent, first, last]).all() and first >= sent and last >= first and output >= 1):
        raise LoadgenError(f"{where}: times out of order or no output token")
    if not (sent >= 0 and last - sent <= MAX_REQUEST_S and last <= MAX_RUN_S):
        raise LoadgenError(
            f"{where}: times no run records (seconds from the run's start, from 0 to {MAX_RUN_S:g}; a request "
            f"at most {MAX_REQUEST_S:g} s long)"
        )
    if not (output <= MAX_TOKENS and isinstance(prompt, int | float) and 0 <= prompt <= MAX_TOKENS):
        raise LoadgenError(f"{where}: output_tokens and prompt_tokens: expected token counts up to {MAX_TOKENS:,}")
    due = [float(t) for k in ("t_intended", "t_slot") if isinstance(t := record.get(k), int | float) and t >= 0]
    lag = max(sent - max(due), 0.0) if due else 0.0  # a send may wake a little early: never a negative lag
    return (label, (sent, float(prompt), output, first, last, lag)), 0
