"""The OpenAI-compatible APIs loadgen sends to: which one a request uses decides its path, the field its
prompt goes in and how its answer arrives. One closed set for the wire, the simulator, profiles, flags and
results files.

Three generate and stream (chat, completions, responses); two pool (embeddings, rerank): a batch of inputs
in one request, answered in one JSON body, nothing streamed and no output token, so only the request's
latency, its inputs and their tokens are measured.
"""

from __future__ import annotations

from enum import StrEnum

RERANK_QUERY_TOKENS = 32  # a rerank request's query (a search query's length): the documents carry the batch


class Api(StrEnum):
    CHAT = "chat"  # /chat/completions: messages in, delta.content out
    COMPLETIONS = "completions"  # /completions: prompt in, text out
    RESPONSES = "responses"  # /responses: input in, typed events out (response.output_text.delta, ...)
    EMBEDDINGS = "embeddings"  # /embeddings: a batch of texts in, one vector each out (not streamed)
    RERANK = "rerank"  # /rerank: a query and a batch of documents in, a relevance score each out (not streamed)

    @property
    def path(self) -> str:
        """The endpoint under the base URL (``/v1/``)."""
        return {Api.CHAT: "chat/completions"}.get(self, self.value)

    @property
    def prompt_field(self) -> str:
        """The request body's field that holds the prompt (a pooling API's: its batch of inputs)."""
        return {Api.CHAT: "messages", Api.COMPLETIONS: "prompt", Api.RERANK: "documents"}.get(self, "input")

    @property
    def messages(self) -> bool:
        """Whether its prompt is a list of role messages (a conversation's history can be sent back)."""
        return self in (Api.CHAT, Api.RESPONSES)

    @property
    def pooling(self) -> bool:
        """Whether it answers a batch of inputs in one JSON body (no stream, no output tokens)."""
        return self in (Api.EMBEDDINGS, Api.RERANK)

    @property
    def max_tokens_field(self) -> str:
        """The request body's field that caps the answer's length."""
        return "max_output_tokens" if self is Api.RESPONSES else "max_tokens"
