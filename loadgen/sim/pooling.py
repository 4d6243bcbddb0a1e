"""The simulator's pooling APIs (embeddings, rerank), pure: parse a batch, count its inputs, frame the answer.

The law (docs/design.md's step law, nothing new): each input of a batch is a
sequence the engine prefills as a prompt (``prefill_ms_per_token`` per token,
chunked under the token budget, queued for a slot like any other) whose pooled
output is ready at the end of its last prefill step, where a generation would
sample its first token; the answer goes out when the batch's last input is
done. A rerank input is its query and one document, as a cross-encoder reads
them. Vectors are a function of the input's index (the load is in the time,
not the numbers).
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass
from typing import Any

from loadgen.api import Api
from loadgen.sim.framing import BadRequest, Tokenizer, UnknownModel, json_object

EMBEDDING_DIM = 16  # floats per simulated vector


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingRequest:
    api: Api
    model: str
    input_tokens: tuple[int, ...]  # each input's prompt tokens (rerank: query and document)
    base64: bool = False  # embeddings' encoding_format
    documents: tuple[str, ...] = ()  # rerank: echoed back in each result


def parse_pooling(
    body: bytes,
    api: Api,
    default_model: str,
    max_model_len: int,
    tokenizer: Tokenizer,
    adapters: tuple[str, ...] = (),
) -> PoolingRequest:
    """Validate an embeddings or rerank body; ``BadRequest`` with the OpenAI-style reason otherwise."""
    data = json_object(body)
    model = data.get("model") or default_model
    if model != default_model and model not in adapters:
        raise UnknownModel(f"The model `{model}` does not exist.")
    documents: tuple[str, ...] = ()
    if api is Api.RERANK:
        query, docs = data.get("query"), data.get("documents")
        if not isinstance(query, str) or not query:
            raise BadRequest("'query' is required and must be a non-empty string")
        if not isinstance(docs, list) or not docs:
            raise BadRequest("'documents' is required and must be a non-empty list")
        documents = tuple(_document_text(d) for d in docs)
        query_words = len(query.split())
        tokens = tuple(tokenizer.count(query_words + len(d.split()), api) for d in documents)
    else:
        tokens = _embedding_inputs(data.get("input"), api, tokenizer)
    if (longest := max(tokens)) > max_model_len:
        raise BadRequest(f"this model's maximum context length is {max_model_len} tokens; an input has {longest}")
    return PoolingRequest(
        api=api,
        model=str(model),
        input_tokens=tokens,
        base64=data.get("encoding_format") == "base64",
        documents=documents,
    )


def _document_text(doc: Any) -> str:
    if isinstance(doc, str):
        return doc
    if isinstance(doc, dict) and isinstance(doc.get("text"), str):
        return str(doc["text"])
    raise BadRequest("each document must be a string or an object with 'text'")


def _embedding_inputs(raw: Any, api: Api, tokenizer: Tokenizer) -> tuple[int, ...]:
    """Tokens per input: a string, a list of strings, a list of token ids, or a list of such lists."""
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'input' is required and must be a string or a non-empty list")
    if all(isinstance(t, int) for t in raw):
        return (len(raw),)
    counts = []
    for item in raw:
        if isinstance(item, str):
            counts.append(max(1, tokenizer.count(len(item.split()), api)))
        elif isinstance(item, list) and item and all(isinstance(t, int) for t in item):
            counts.append(len(item))
        else:
            raise BadRequest("each 'input' entry must be a string or a non-empty list of token ids")
    return tuple(counts)


def pooling_body(req: PoolingRequest, request_id: str, created: int) -> dict[str, Any]:
    """The answer, once every input is pooled: vectors (embeddings) or scores, best first (rerank)."""
    total = sum(req.input_tokens)
    if req.api is Api.RERANK:
        scores = [0.5 + 0.5 * math.sin(i + 1) for i in range(len(req.documents))]
        ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
        results = [{"index": i, "document": {"text": req.documents[i]}, "relevance_score": scores[i]} for i in ranked]
        return {"id": request_id, "model": req.model, "usage": {"total_tokens": total}, "results": results}
    data = []
    for i in range(len(req.input_tokens)):
        vector = [math.cos(i + k) for k in range(EMBEDDING_DIM)]
        encoded: Any = vector
        if req.base64:
            encoded = base64.b64encode(struct.pack(f"<{EMBEDDING_DIM}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": encoded})
    return {
        "id": request_id,
        "object": "list",
        "created": created,
        "model": req.model,
        "data": data,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }
