"""What one request produced (pure data), and the optional raw records file.

``RequestRecord`` is the client's whole output and the recorder's whole
input: timestamps on one monotonic clock, counts, and a failure kind. It
lives here, away from the HTTP stack, so the metric code and the planner's
tests can build records without importing httpx or aiohttp.

``--records out.jsonl`` writes one record per line. Never inside the results
file. Records hold timestamps, counts and a short error reason only: no
prompts, headers or keys.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from loadgen.errors import ErrorKind
from loadgen.load import Load
from loadgen.wire.secrets import scrub

Clock = Callable[[], float]  # monotonic seconds (time.monotonic): one clock for every timestamp


@dataclass(
    slots=True, kw_only=True
)  # not frozen: its __init__ would set the 17 fields through object.__setattr__, 2.4x the cost
class RequestRecord:
    """What one request produced. Times are loop-clock seconds. Never changed once built (``replace``)."""

    t_intended: float  # when it was due (open loop: schedule; closed loop: worker free)
    t_slot: float | None  # open loop with an in-flight cap: when it got a slot
    t_sent: float  # when it was handed to the HTTP client
    t_first: float | None  # first token event (or text chunk, by the metric convention)
    t_last: float | None  # last token event (or text chunk)
    t_done: float  # end of stream, or the failure
    chunk_times: tuple[float, ...]  # arrival of each token event (or text chunk)
    chunk_tokens: tuple[int, ...] | None  # tokens per such chunk, when the server says (per-chunk usage)
    output_tokens: int | None  # usage.completion_tokens, else the count of timed chunks
    output_tokens_estimated: bool  # True when counted from chunks (no usage from the server)
    prompt_tokens: int | None  # usage.prompt_tokens
    error: ErrorKind | None  # None means success
    http_status: int | None
    error_detail: str | None = None  # a short reason, never a traceback or a header
    request_id: str | None = None  # what was sent in the request-id header (--request-id-header)
    response_id: str | None = None  # the server's own id for the response (the chunks' "id")
    turn: int | None = None  # multi-turn sessions: which turn of its conversation (1 = the first)
    cut: bool = False  # still in flight when its level ended: no outcome (neither completed nor failed)
    # reasoning models and agents: the first answer token (content or a tool call, not reasoning); the
    # reasoning tokens (the server's usage, else the reasoning events counted); whether it called a tool
    t_first_output: float | None = None
    reasoning_tokens: int | None = None
    reasoning_reported: bool = False  # reasoning_tokens from usage.completion_tokens_details
    tool_call: bool = False
    image_tokens: int | None = None  # of prompt_tokens, the images' (usage.prompt_tokens_details.image_tokens)
    model: str | None = None  # the model it named, where the workload splits requests over several (adapters)
    inputs: int = 0  # a pooling request's inputs its answer accounted for (embeddings, rerank); 0: generation

    @property
    def ok(self) -> bool:
        return self.error is None and not self.cut


class RecordsWriter:
    """One JSON line per request; ``secrets`` are scrubbed from the server's error text first.

    A line is the record's fields, shallow (each is a number, a string, None or a tuple of numbers),
    dumped by orjson: ``dataclasses.asdict`` copies a tuple element by element and ``json.dumps``
    formats each float in Python, which together cost ~5 us per streamed token at 256 streams, a
    third of the client's CPU (``benchmarks/client_overhead.py``). Text that orjson refuses (a lone
    surrogate a server sent in an id, escaped) is dumped by ``json`` instead: a record is never lost.
    """

    FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))

    def __init__(self, path: Path, secrets: tuple[str, ...] = ()) -> None:
        self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._load: Load | None = None
        self._secrets = secrets
        self.failed: str | None = None  # why the records stopped being written (the run goes on)

    def set_level(self, load: Load) -> None:
        self._load = load

    def write(self, record: RequestRecord) -> None:
        if self.failed is not None:
            return
        row: dict[str, Any] = {name: getattr(record, name) for name in self.FIELDS}
        row["load"] = self._load.label if self._load else None
        for key in ("error_detail", "response_id", "request_id"):  # text a server supplied or echoed
            if row[key]:
                row[key] = scrub(row[key], self._secrets)
        try:
            line = orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:
            line = (json.dumps(row) + "\n").encode()
        try:
            self._file.write(line)
        except OSError as exc:  # a full disk ends the records, never the run (its results are still saved)
            self.failed = exc.strerror or type(exc).__name__

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as exc:
            self.failed = self.failed or exc.strerror or type(exc).__name__
