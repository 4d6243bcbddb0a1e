"""A ``--records`` file (one JSON line per request) read back, and as a table of per-request metrics.

What other tools read of a run's requests (``loadgen export``): each request's
times and its metrics, computed by ``loadgen.run.metrics.request_metrics``, the
one place they are computed, so an exported TTFT is the TTFT the histograms
hold. Its token events stay a list (Parquet keeps it as one; CSV joins it).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from loadgen.errors import ErrorKind, UsageError, parse_json
from loadgen.inputs.textfiles import read_text
from loadgen.run.metrics import request_metrics
from loadgen.wire.records import RequestRecord

FIELDS = {f.name: f for f in dataclasses.fields(RequestRecord)}
TIMES = ("t_intended", "t_sent", "t_done")  # every record has them
COLUMNS = (
    "load", "model", "turn", "ok", "error", "http_status", "t_intended", "t_sent", "t_first", "t_last", "t_done",
    "ttft_ms", "ttft_sent_ms", "ttfo_ms", "tpot_ms", "e2e_ms", "inputs", "prompt_tokens", "image_tokens", "output_tokens",
    "output_tokens_estimated", "reasoning_tokens", "token_events", "request_id", "response_id", "chunk_times",
)  # fmt: skip


def read_records(path: Path, flag: str = "RECORDS") -> list[tuple[str | None, RequestRecord]]:
    """Each line's level label and record; one line naming the file and line for anything that is not one."""
    out = []
    for no, line in enumerate(read_text(path, flag).splitlines(), 1):
        if not line.strip():
            continue
        row = parse_json(line, f"{flag} {path}:{no}")
        if not isinstance(row, dict) or not all(isinstance(row.get(t), int | float) for t in TIMES):
            raise UsageError(f"{flag} {path}:{no}: not a loadgen request record (written by run --records)")
        try:
            values = {name: row[name] for name in FIELDS if name in row}
            values["chunk_times"] = tuple(float(t) for t in values.get("chunk_times") or ())
            if values.get("chunk_tokens") is not None:
                values["chunk_tokens"] = tuple(int(n) for n in values["chunk_tokens"])
            values["error"] = ErrorKind(values["error"]) if values.get("error") is not None else None
            record = RequestRecord(**{"t_slot": None, "t_first": None, "t_last": None, "chunk_tokens": None,
                                      "output_tokens": None, "output_tokens_estimated": False, "prompt_tokens": None,
                                      "http_status": None, **values})  # fmt: skip
        except (TypeError, ValueError):
            raise UsageError(f"{flag} {path}:{no}: a field of the wrong type (written by run --records?)") from None
        if not all(math.isfinite(getattr(record, t)) for t in TIMES):
            raise UsageError(f"{flag} {path}:{no}: times must be finite numbers")
        load = row.get("load")
        out.append((load if isinstance(load, str) else None, record))
    if not out:
        raise UsageError(f"{flag} {path}: no records")
    return out


def record_row(load: str | None, record: RequestRecord) -> dict[str, Any]:
    """One request as the export's row (metrics in ms; None where a failed request has none)."""
    m = request_metrics(record) if record.ok else None

    def ms(seconds: float | None) -> float | None:
        return None if seconds is None else round(seconds * 1000.0, 4)

    return {
        "load": load, "model": record.model, "turn": record.turn, "ok": record.ok,
        "error": record.error.value if record.error is not None else None, "http_status": record.http_status,
        "t_intended": record.t_intended, "t_sent": record.t_sent, "t_first": record.t_first,
        "t_last": record.t_last, "t_done": record.t_done,
        "ttft_ms": ms(m.ttft_s) if m else None, "ttft_sent_ms": ms(m.ttft_sent_s) if m else None,
        "ttfo_ms": ms(m.ttfo_s) if m else None, "tpot_ms": ms(m.tpot_s) if m else None,
        "e2e_ms": ms(m.e2e_s) if m else None,
        "inputs": record.inputs, "prompt_tokens": record.prompt_tokens, "image_tokens": record.image_tokens,
        "output_tokens": record.output_tokens, "output_tokens_estimated": record.output_tokens_estimated,
        "reasoning_tokens": record.reasoning_tokens, "token_events": len(record.chunk_times),
        "request_id": record.request_id, "response_id": record.response_id,
        "chunk_times": list(record.chunk_times),
    }  # fmt: skip
