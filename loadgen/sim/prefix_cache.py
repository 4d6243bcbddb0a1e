"""The simulator's prefix cache: a conversation's earlier turns cost no prefill the second time.

Real engines (vLLM's automatic prefix caching, SGLang's radix cache) keep the
KV cache of prompts they have seen; a multi-turn chat resends its whole
history each turn, and only the new tail needs prefill. The simulator keys a
conversation by its messages: after a turn it remembers ``messages + the
answer it streamed`` with their token count, and a request whose messages
before the last one match a remembered context has that many prompt tokens
cached. Least recently used contexts are forgotten beyond ``capacity``.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any


def context_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """A digest of the messages' roles and contents (what a client sends back verbatim)."""
    canonical = json.dumps([[m.get("role"), m.get("content")] for m in messages], separators=(",", ":"))
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


class PrefixCache:
    """Remembered contexts (digest -> prompt tokens they hold), least recently used first."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._tokens: OrderedDict[str, int] = OrderedDict()
        # prompt tokens looked up and found, over every request (vLLM's prefix_cache_queries / _hits)
        self.queried_tokens = 0
        self.hit_tokens = 0

    def cached_tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Prompt tokens of this request already cached: those of its history, if remembered."""
        if len(messages) < 2:
            return 0
        key = context_key(messages[:-1])
        tokens = self._tokens.get(key)
        if tokens is None:
            return 0
        self._tokens.move_to_end(key)
        return tokens

    def lookup(self, messages: Sequence[Mapping[str, Any]], prompt_tokens: int) -> int:
        """A request's prompt tokens found cached (none without a history), counted for the server's
        counters, from which a client reads how much prefill the cache spared."""
        cached = min(self.cached_tokens(messages), prompt_tokens)
        self.queried_tokens += prompt_tokens
        self.hit_tokens += cached
        return cached

    def remember(self, messages: Sequence[Mapping[str, Any]], answer: str, tokens: int) -> None:
        """After a turn: its messages and answer, ``tokens`` long, are in the cache."""
        key = context_key([*messages, {"role": "assistant", "content": answer}])
        self._tokens[key] = tokens
        self._tokens.move_to_end(key)
        while len(self._tokens) > self.capacity:
            self._tokens.popitem(last=False)
