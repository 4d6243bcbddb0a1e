"""The sizes loadgen accepts, wherever a value comes from: a flag, a profile, a trace row, a dataset record.

One set of bounds: a profile's ``prompt_tokens: 300000000`` or a trace row of
3e8 tokens once built that prompt (3 GB in seconds) because only ``run``'s
flags were checked. Each reader refuses a value past these in one line naming
its flag, field or row.
"""

from __future__ import annotations

MAX_CONCURRENCY = 100_000  # clients (or an in-flight cap) in one level: one process; --workers or hosts beyond
MAX_RATE_RPS = 100_000.0  # requests per second offered in one level
MAX_FLEET_RPS = 1e8  # requests/s a plan or a whole fleet is asked to serve: past it no demand is a measurement
MAX_TOKENS = 1_000_000  # prompt or output tokens of one request
MAX_LEVELS = 100  # levels in one sweep, listed or generated
MAX_FILE_LEVELS = 5_000  # levels in one results file or one imported table (a 100,000-row import once took 4 GB)
MAX_RETRIES = 10  # measurements of one level beyond the first (--retries): each is a whole level's time
MAX_EVENT_CHARS = 4 << 20  # a line, or an event's data, longer than this fails the request (4 Mi characters)
MAX_POOLED_BODY_BYTES = 64 << 20  # an embeddings or rerank answer longer than this fails its request
MAX_BATCH = 4_096  # inputs (rerank: documents) in one pooling request
MAX_TURNS = 1_000  # turns in one multi-turn conversation
MAX_THINK_TIME_S = 3_600.0  # a conversation's pause between turns
MAX_TIME_SCALE = 1_000.0  # a trace replayed this many times slower at most
