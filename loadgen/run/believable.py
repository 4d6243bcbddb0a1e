"""A server's token counts bounded before they are believed (pure).

A stream's usage says how many tokens the server produced, and continuous usage (vLLM's per-chunk
``completion_tokens``) how many each chunk held. Both are the server's word: a count past what the
request asked for (``max_tokens``) or a running count that goes backwards is no measurement, and
believed it became a rate of 10^19 tokens/s, or a chunk of 10^18 tokens expanded into that many ITL
samples (an allocation of exbibytes). Such a stream is a named failure, ``malformed_chunk``, with
what the server said, never a success.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from loadgen.errors import ErrorKind
from loadgen.wire.records import RequestRecord


def believable(record: RequestRecord, max_tokens: int) -> RequestRecord:
    """``record``, or the same request failed as ``malformed_chunk`` where its counts cannot be true for a
    request that asked for at most ``max_tokens`` output tokens (0: a pooling request, none asked)."""
    if record.error is not None or max_tokens <= 0:
        return record
    why = None
    if record.chunk_tokens is not None and any(n < 0 for n in record.chunk_tokens):
        why = "the server's running output token count went backwards"
    elif record.chunk_tokens is not None and sum(record.chunk_tokens) > max_tokens:
        why = f"the server's running usage counted {sum(record.chunk_tokens)} output tokens"
    elif record.output_tokens is not None and record.output_tokens > max_tokens:
        why = f"the server's usage said {record.output_tokens} output tokens"
    if why is None:
        return record
    return replace(record, error=ErrorKind.MALFORMED_CHUNK, error_detail=f"{why} where max_tokens was {max_tokens}")


def asked_max_tokens(body: Mapping[str, Any], field: str) -> int:
    """The output tokens a request body asks for at most (``max_completion_tokens`` where it is set, else the
    API's own field); 0 where it holds no count this can bound by (an --extra-body that set something else)."""
    sent = body.get("max_completion_tokens", body.get(field))
    return sent if isinstance(sent, int) and not isinstance(sent, bool) and sent > 0 else 0
