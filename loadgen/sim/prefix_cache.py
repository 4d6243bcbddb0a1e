"""The simulator's prefix cache: prompt blocks it has seen cost no prefill the second time.

Real engines (vLLM's automatic prefix caching, SGLang's radix cache) keep the
KV cache of the prompts they have prefilled, in blocks (vLLM: 16 tokens), each
block named by its tokens and every token before it; a request whose leading
blocks are all known prefills only the rest. The simulator does the same over
the prompt's words (its tokens, ``loadgen.sim.framing``): a multi-turn chat
resends its history and finds it cached, and a replayed trace whose requests
share ``hash_ids`` shares exactly the blocks the trace says. After a turn the
answer's blocks are remembered with the prompt's, so the next turn's history
is found whole. Least recently used blocks are forgotten beyond ``capacity``.

Roles and a chat template's own tokens are not part of a block's name: two
conversations with the same words under different roles share blocks here
where an engine's template would tell them apart (the load generator never
sends such pairs).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BLOCK_TOKENS = 16  # vLLM's default block size


def block_keys(words: Sequence[str], block: int = BLOCK_TOKENS, model: str = "") -> list[int]:
    """The names of the prompt's full blocks, each hashing its words and the block before it (a chain, so a
    block matches only after the same prefix), starting from the model's name: a LoRA adapter's KV differs
    from the base model's (vLLM puts the adapter in its block hashes). Python's tuple hash: 64 bits."""
    keys, previous = [], hash(model)
    for start in range(0, len(words) - block + 1, block):
        previous = hash((previous, tuple(words[start : start + block])))
        keys.append(previous)
    return keys


class PrefixCache:
    """Remembered blocks, least recently used first, and vLLM's counters of what was looked up and found."""

    def __init__(self, capacity_blocks: int = 65_536, block: int = BLOCK_TOKENS) -> None:
        self.capacity = capacity_blocks
        self.block = block
        self._blocks: OrderedDict[int, None] = OrderedDict()
        # prompt tokens looked up and found, over every request (vLLM's prefix_cache_queries / _hits)
        self.queried_tokens = 0
        self.hit_tokens = 0

    def cached_words(self, words: Sequence[str], model: str = "") -> int:
        """Leading words of the prompt already cached: its leading blocks that are all remembered."""
        found = 0
        for key in block_keys(words, self.block, model):
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            found += 1
        return found * self.block

    def lookup(self, words: Sequence[str], prompt_tokens: int, tokens_per_word: float = 1.0, model: str = "") -> int:
        """A request's prompt tokens found cached, counted for the server's counters (from which a client
        reads how much prefill the cache spared). At least one token is always prefilled, as in vLLM: the
        first output token needs the last prompt token's step."""
        cached = min(round(self.cached_words(words, model) * tokens_per_word), max(prompt_tokens - 1, 0))
        self.queried_tokens += prompt_tokens
        self.hit_tokens += cached
        return cached

    def remember(self, words: Sequence[str], model: str = "") -> None:
        """These words' full blocks are in the cache now (a prompt once admitted; a prompt with its answer)."""
        for key in block_keys(words, self.block, model):
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
