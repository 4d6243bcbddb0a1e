"""The two OpenAI-compatible APIs loadgen streams from: which one a request uses decides its path, the
field its prompt goes in and how a streamed chunk carries its text. One closed set for the wire, the
simulator, profiles, flags and results files."""

from __future__ import annotations

from enum import StrEnum


class Api(StrEnum):
    CHAT = "chat"  # /chat/completions: messages in, delta.content out
    COMPLETIONS = "completions"  # /completions: prompt in, text out

    @property
    def path(self) -> str:
        """The endpoint under the base URL (``/v1/``)."""
        return "chat/completions" if self is Api.CHAT else "completions"

    @property
    def prompt_field(self) -> str:
        """The request body's field that holds the prompt."""
        return "messages" if self is Api.CHAT else "prompt"
