"""The OpenAI-compatible APIs loadgen streams from: which one a request uses decides its path, the
field its prompt goes in and how a streamed event carries its text. One closed set for the wire, the
simulator, profiles, flags and results files."""

from __future__ import annotations

from enum import StrEnum


class Api(StrEnum):
    CHAT = "chat"  # /chat/completions: messages in, delta.content out
    COMPLETIONS = "completions"  # /completions: prompt in, text out
    RESPONSES = "responses"  # /responses: input in, typed events out (response.output_text.delta, ...)

    @property
    def path(self) -> str:
        """The endpoint under the base URL (``/v1/``)."""
        return {Api.CHAT: "chat/completions", Api.COMPLETIONS: "completions", Api.RESPONSES: "responses"}[self]

    @property
    def prompt_field(self) -> str:
        """The request body's field that holds the prompt."""
        return {Api.CHAT: "messages", Api.COMPLETIONS: "prompt", Api.RESPONSES: "input"}[self]

    @property
    def messages(self) -> bool:
        """Whether its prompt is a list of role messages (a conversation's history can be sent back)."""
        return self is not Api.COMPLETIONS

    @property
    def max_tokens_field(self) -> str:
        """The request body's field that caps the answer's length."""
        return "max_output_tokens" if self is Api.RESPONSES else "max_tokens"
