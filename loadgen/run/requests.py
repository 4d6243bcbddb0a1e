"""What each request asks for, built per request: prompts, output lengths, and the JSON body.

No tokenizer download: a synthetic prompt of N "tokens" is N common short
English words, each a single token in the usual BPE vocabularies (and
exactly one token under the simulator's whitespace rule). The realised
counts are taken from the server's ``usage`` and reported. By default each
prompt starts with a per-request nonce so prefix caches cannot flatter TTFT.
The session's probes measure how the server counts those words (``PromptCalibration``).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from loadgen.api import RERANK_QUERY_TOKENS, Api
from loadgen.inputs.images import ImageSource, ImageSpec
from loadgen.inputs.model_mix import ModelMix
from loadgen.inputs.workload import DatasetEntry, flatten_messages
from loadgen.lengths import Lengths
from loadgen.run.believable import asked_max_tokens
from loadgen.wire.sse import Convention

VOCABULARY = [
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
]


@dataclass(frozen=True, slots=True)
class PromptCalibration:
    """How the server counts a synthetic prompt: ``tokens = overhead + tokens_per_word * words``.

    Synthetic words are not one token each in every tokenizer (a 64-word prompt
    was ~223 tokens on one model), so the session measures this line before
    the load (``calibration_probe``) and sizes prompts by it. ``words`` counts
    the first word (the nonce), whose own tokens land in ``overhead``.
    """

    overhead_tokens: float  # the chat template's own tokens and the first word's (0 for completions, mostly)
    tokens_per_word: float

    @classmethod
    def from_probes(cls, once: int, twice: int) -> PromptCalibration | None:
        """From the prompt tokens the server counted for ``calibration_probe(1)`` and ``(2)``; None when
        the counts cannot be a tokenizer's (the second must be the longer)."""
        per_word = (twice - once) / len(VOCABULARY)
        if per_word <= 0:
            return None
        return cls(overhead_tokens=once - per_word * (1 + len(VOCABULARY)), tokens_per_word=per_word)

    def tokens_for(self, words: int) -> float:
        return self.overhead_tokens + self.tokens_per_word * words

    def words_for(self, tokens: float, dither: float = 0.5) -> int:
        """The words whose count is closest to ``tokens``; ``dither`` (uniform in [0, 1)) rounds up or down
        at random instead, so that prompts average the length asked (a word may be several tokens)."""
        return max(1, math.floor((tokens - self.overhead_tokens) / self.tokens_per_word + dither))


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """How to build request bodies for one run."""

    api: Api
    model: str
    prompt_tokens: Lengths = field(default_factory=lambda: Lengths(128))
    output_tokens: Lengths = field(default_factory=lambda: Lengths(128))
    dataset: tuple[DatasetEntry, ...] | None = None
    output_from_dataset: bool = False  # max_tokens = the dataset's recorded answer length, where it has one
    lengths: tuple[tuple[int, int], ...] | None = None  # per request (prompt, output) tokens: a replayed trace
    # per request, the trace's prompt blocks (``loadgen.inputs.trace``): prompts share text where blocks are shared
    prompt_blocks: tuple[tuple[int, ...], ...] | None = None
    block_tokens: int = 512
    images: ImageSpec | None = None  # images in each request's user message (chat, responses)
    models: ModelMix | None = None  # each request's model drawn from this split (LoRA adapters); None: ``model``
    batch: int = 1  # pooling APIs (embeddings, rerank): inputs (documents) per request, each prompt_tokens long
    turns: int = 1  # closed-loop chat: turns per conversation, each sending the whole history back
    think_time_s: float = 0.0  # mean pause (exponential) between a conversation's turns
    unique_prompts: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    metric_convention: Convention = Convention.TOKENS  # which chunks time the stream (loadgen.wire.sse.Convention)
    calibration: PromptCalibration | None = None  # set by the session's probes; None: one word a token

    @property
    def path(self) -> str:
        return self.api.path


@dataclass(slots=True, kw_only=True)  # built once per request: not frozen (object.__setattr__ per field), never changed
class PreparedRequest:
    body: bytes
    max_tokens: int  # the output tokens the server was asked for at most (0: none we can bound by)
    messages: tuple[Mapping[str, Any], ...] | None = None  # chat: what was sent (a conversation's next history)
    words: int | None = None  # a synthetic prompt's words, alone in the request: its usage corrects the sizing
    model: str | None = None  # the model it named, where the workload splits requests over several
    inputs: int = 0  # a pooling request's inputs (embeddings: texts; rerank: documents); 0 for generation


class Conversation:
    """One closed-loop client's multi-turn chat: the history it sends back and the turn that comes next.

    Each turn sends every earlier message and answer verbatim plus a new user
    prompt, so the prompt grows turn by turn (the prefix cache's real
    workload). A failed turn, or the last one, starts a new conversation.
    """

    __slots__ = ("history", "turn", "turns")

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.turn = 1
        self.history: tuple[Mapping[str, Any], ...] = ()

    def advance(self, sent: tuple[Mapping[str, Any], ...] | None, answer: str, ok: bool) -> bool:
        """After a turn; True when the conversation goes on (the client then thinks before the next turn)."""
        if ok and sent is not None and self.turn < self.turns:
            self.history = (*sent, {"role": "assistant", "content": answer})
            self.turn += 1
            return True
        self.history, self.turn = (), 1
        return False


PREPARED_AHEAD = 32  # single-turn bodies built together at most (``RequestFactory.next``)
PREPARED_AHEAD_BYTES = 16 * 1024  # and no more body bytes than this: streams wait while they are built
SETTLED_AFTER = 64  # usage counts after which a calibrated prompt's length correction barely moves
DECKS_AT_ONCE = 16  # vocabulary decks shuffled together (``_Deck``)


class RequestFactory:
    """Builds the i-th request body of a run: its lengths and words from the seed, its nonce the run's own.

    Synthetic prompts are sized by the session's calibration, corrected as
    requests complete by what the server counted (``observe``): the probe
    measures the tokenizer's mean over the vocabulary exactly, but the nonce
    and the chat template are one draw each, and a tokenizer may join words.
    """

    def __init__(self, workload: Workload, seed: int) -> None:
        self._w = workload
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._count = 0
        # a dataset is visited in an order drawn from the seed (its own stream: synthetic draws stay as they were)
        n = len(workload.dataset) if workload.dataset else 0
        self._order = np.random.default_rng([seed, 1]).permutation(n) if n else None
        self._deck = _Deck(np.random.default_rng([seed, 3]), VOCABULARY)
        self._images = ImageSource(workload.images, seed) if workload.images is not None else None
        self._model_rng = np.random.default_rng([seed, 9])  # its own stream: the prompts stay as they were
        self._residual_sum = 0.0  # prompt tokens counted minus the calibration's prediction, summed
        self._residuals = 0
        self._ahead: list[PreparedRequest] = []  # built together, handed out last first (see ``next``)
        # the run's own, mixed into every nonce: the seed alone would send a rerun the same prompts, which
        # a server's prefix cache then serves without prefill (vLLM: 512-token prompts read 8.3 ms, not 16.5)
        self._salt = secrets.randbits(40)

    @property
    def turns(self) -> int:
        return self._w.turns

    @property
    def think_time_s(self) -> float:
        return self._w.think_time_s

    def next(self, history: tuple[Mapping[str, Any], ...] = ()) -> PreparedRequest:
        """The next request; ``history``: a conversation's earlier turns, sent before the new prompt.

        Single-turn bodies are built up to ``PREPARED_AHEAD`` at a time once nothing is left to correct them
        (no calibration, or usage has settled it): the same bodies in the same order, only built
        together. Between two requests of a level hundreds of socket reads run, and code run once in
        between runs with cold caches: one body cost ~50 us there against ~9 in a loop (at 256 streams,
        32 tokens an answer, building 64 together cut the client's CPU by 7%). No more than
        ``PREPARED_AHEAD_BYTES`` are built at once, so the streams' reads wait at most a fraction of a
        millisecond for it, however long the prompts.
        """
        if self._ahead:
            return self._ahead.pop()
        if history or self._w.turns > 1 or not self._settled():
            return self._build(history)
        ahead: list[PreparedRequest] = []
        size = 0
        while len(ahead) < PREPARED_AHEAD and size < PREPARED_AHEAD_BYTES:  # long prompts: fewer at once
            ahead.append(self._build(()))
            size += len(ahead[-1].body)
        ahead.reverse()
        self._ahead = ahead
        return ahead.pop()

    def _settled(self) -> bool:
        """Whether usage can no longer move the prompts' length much: a body built ahead misses the
        corrections of the requests before it (up to ``PREPARED_AHEAD`` of them)."""
        return self._w.calibration is None or self._w.dataset is not None or self._residuals >= SETTLED_AFTER

    def _build(self, history: tuple[Mapping[str, Any], ...]) -> PreparedRequest:
        w, rng, i = self._w, self._rng, self._count
        self._count += 1
        max_tokens = w.output_tokens.draw(rng)
        prompt_tokens = None
        words = None
        if w.lengths:
            prompt_tokens, max_tokens = w.lengths[i % len(w.lengths)]
        model = w.models.draw(self._model_rng) if w.models is not None else None
        if w.api.pooling:
            return self._pooled(model, prompt_tokens)
        body: dict[str, Any] = {"model": model or w.model, w.api.max_tokens_field: max_tokens}
        if w.dataset is not None and self._order is not None:
            entry = w.dataset[int(self._order[i % len(w.dataset)])]
            if w.output_from_dataset and entry.answer_words:
                per_word = w.calibration.tokens_per_word if w.calibration else 1.0
                max_tokens = max(1, round(entry.answer_words * per_word))
            max_tokens = entry.max_tokens or max_tokens
            body[w.api.max_tokens_field] = max_tokens
            if w.api.messages:
                body[w.api.prompt_field] = (
                    list(entry.messages) if entry.messages else [{"role": "user", "content": entry.prompt}]
                )
            else:
                body["prompt"] = entry.prompt if entry.prompt is not None else flatten_messages(entry.messages or ())
        else:
            if w.prompt_blocks is not None and prompt_tokens is not None:
                text, words = self._block_prompt(w.prompt_blocks[i % len(w.prompt_blocks)], prompt_tokens)
            else:
                text, words = self._synthetic_prompt(prompt_tokens or w.prompt_tokens.draw(rng))
            images = [self._images.next() for _ in range(w.images.count)] if self._images and w.images else []
            body[w.api.prompt_field] = _prompt_field(w.api, text, history, images)
            # a conversation's usage counts its history too, and a request's images: neither corrects the sizing
            words = None if history or images else words
        return self._prepared(body, max_tokens, words, model)

    def _pooled(self, model: str | None, prompt_tokens: int | None) -> PreparedRequest:
        """A pooling request: ``batch`` distinct synthetic texts (their lengths drawn from the prompt
        lengths), as embeddings' ``input`` or as the documents a rerank scores against a query of
        ``RERANK_QUERY_TOKENS``. Usage counts the batch's tokens together, so it corrects no sizing
        beyond a batch of one."""
        w, rng = self._w, self._rng
        texts = [self._synthetic_prompt(prompt_tokens or w.prompt_tokens.draw(rng)) for _ in range(w.batch)]
        body: dict[str, Any] = {"model": model or w.model}
        if w.api is Api.RERANK:
            body["query"] = self._synthetic_prompt(RERANK_QUERY_TOKENS)[0]
            body["documents"] = [text for text, _ in texts]
        else:
            body["input"] = [text for text, _ in texts]
            body["encoding_format"] = "base64"  # a quarter of float text's bytes, the same vectors
        words = texts[0][1] if w.batch == 1 and w.api is Api.EMBEDDINGS else None
        return self._prepared(body, 0, words, model)

    def _block_prompt(self, blocks: tuple[int, ...], tokens: int) -> tuple[str, int]:
        """A replayed request's prompt, ``tokens`` long, block by block: a block's words are a function of its
        id, the level's seed and its salt, so requests of the level that name the same blocks start with
        the same text (a server's prefix cache serves exactly what the trace shares), and neither another
        level nor a rerun finds them cached. Words past the named blocks are the request's own."""
        per_word = self._w.calibration.tokens_per_word if self._w.calibration else 1.0
        total = self._w.calibration.words_for(tokens) if self._w.calibration else tokens
        block_words = max(1, round(self._w.block_tokens / per_word))
        out: list[str] = []
        for block in blocks:
            if len(out) >= total:
                break
            out += self._block_words(block, min(block_words, total - len(out)))
        if len(out) < total:
            tail = self._deck.deal(total - len(out))
            tail[0] = self._nonce()
            out += tail
        return " ".join(out), total

    def _block_words(self, block: int, n: int) -> list[str]:
        """The first ``n`` words of block ``block``: a word naming it, then words dealt from its own decks."""
        mark = f"b{(block * 0x9E3779B97F4A7C15 ^ self._salt) & 0xFFFFFFFFFF:010x}"
        if n == 1:  # the mark alone: no deck to seed (a seeded generator a block cost 239 s for 10^6 blocks)
            return [mark]
        return [mark, *_Deck(np.random.default_rng([self._seed, 5, block]), VOCABULARY).deal(n - 1)][:n]

    def calibration_probe(self, copies: int) -> PreparedRequest:
        """A one-token request whose prompt is a request's first word, then every vocabulary word
        ``copies`` times, shuffled: the difference of two counts is the vocabulary's mean, exactly
        (a sample of random words would carry its own draw into every run; see ``PromptCalibration``)."""
        first = self._nonce() if self._w.unique_prompts else VOCABULARY[0]
        words = [VOCABULARY[j] for _ in range(copies) for j in self._rng.permutation(len(VOCABULARY))]
        text = " ".join([first, *words])
        api = self._w.api
        body: dict[str, Any] = {"model": self._w.model}
        if api is Api.RERANK:  # the query's tokens are in both counts: the difference is the document's
            body.update(query=VOCABULARY[0], documents=[text])
        elif api.pooling:
            body.update(input=[text], encoding_format="base64")
        else:
            body.update({api.max_tokens_field: 1, api.prompt_field: _prompt_field(api, text, ())})
        return self._prepared(body, 1, 1 + len(words))

    def calibration(self, once: int, twice: int) -> PromptCalibration | None:
        """The calibration the two probes' prompt tokens imply (``calibration_probe(1)`` and ``(2)``): a rerank
        probe's one-word query is in both counts, and no document's, so it leaves the overhead."""
        calibration = PromptCalibration.from_probes(once, twice)
        if calibration is not None and self._w.api is Api.RERANK:
            return replace(calibration, overhead_tokens=calibration.overhead_tokens - calibration.tokens_per_word)
        return calibration

    def observe(self, prepared: PreparedRequest, prompt_tokens: int | None) -> None:
        """A completed request's prompt tokens as the server counted them (its usage)."""
        if prepared.words is not None and prompt_tokens is not None and self._w.calibration is not None:
            self._residual_sum += prompt_tokens - self._w.calibration.tokens_for(prepared.words)
            self._residuals += 1

    def _prepared(
        self, body: dict[str, Any], max_tokens: int, words: int | None, model: str | None = None
    ) -> PreparedRequest:
        extra = dict(self._w.extra_body)
        if self._w.api.pooling:  # one JSON answer: nothing to stream, usage always in it; its batch is its inputs
            body.update(extra)
            n = len(body[self._w.api.prompt_field])
            return PreparedRequest(body=orjson.dumps(body), max_tokens=max_tokens, words=words, model=model, inputs=n)
        body["stream"] = True
        options = {**extra.pop("stream_options", {}), "include_usage": True}
        if self._w.api is not Api.RESPONSES:  # the Responses API reports usage in response.completed, always
            body["stream_options"] = options
        body.update(extra)
        field = self._w.api.prompt_field
        held = tuple(body[field]) if self._w.turns > 1 and isinstance(body.get(field), list) else None  # the history
        max_tokens = asked_max_tokens(body, self._w.api.max_tokens_field)  # an --extra-body override included
        return PreparedRequest(body=orjson.dumps(body), max_tokens=max_tokens, messages=held, words=words, model=model)

    def _synthetic_prompt(self, tokens: int) -> tuple[str, int]:
        calibration = self._w.calibration
        if calibration is None:
            n = tokens
        else:
            correction = self._residual_sum / self._residuals if self._residuals else 0.0
            n = calibration.words_for(tokens - correction, dither=self._deck.uniform())
        words = self._deck.deal(n)
        if self._w.unique_prompts:
            words[0] = self._nonce()
        return " ".join(words), n

    def _nonce(self) -> str:
        """A per-request first word: no two prompts, in this run or another, share a prefix for a cache to serve.
        Ten hex digits always, so a body's length does not depend on the run's salt."""
        return f"r{(self._rng.bit_generator.random_raw() >> 24) ^ self._salt:010x}"  # 40 bits; .integers costs 6x


class _Deck:
    """Vocabulary words dealt from shuffled decks, each word once per deck.

    Drawn independently, a prompt's words are a sample whose mean tokens per
    word wander from the vocabulary's (the spread of a 50-word prompt was
    +-6% on one tokenizer); dealt from decks, every word comes as often as
    every other, so the realised lengths hold the calibration's mean and a
    prompt's spread is a fraction of a sample's.
    """

    __slots__ = ("_cards", "_next", "_order", "_rng", "_words")

    def __init__(self, rng: np.random.Generator, words: Sequence[str]) -> None:
        self._rng = rng
        self._words = np.array(words, dtype=object)
        self._order = np.tile(np.arange(len(words)), (DECKS_AT_ONCE, 1))
        self._cards = self._shuffled()
        self._next = 0

    def _shuffled(self) -> list[str]:
        """``DECKS_AT_ONCE`` fresh decks end to end, each in its own order drawn from the deck's stream: one
        numpy call for all (a deck at a time cost 8 us, 2 this way), dealt by slicing, so a prompt's words
        cost no Python step each."""
        cards: list[str] = self._words[self._rng.permuted(self._order, axis=1)].ravel().tolist()
        return cards

    def uniform(self) -> float:
        return float(self._rng.random())

    def deal(self, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            if self._next == len(self._cards):
                self._cards, self._next = self._shuffled(), 0
            take = min(n - len(out), len(self._cards) - self._next)
            out += self._cards[self._next : self._next + take]
            self._next += take
        return out


def _prompt_field(api: Api, text: str, history: tuple[Mapping[str, Any], ...], images: Sequence[str] = ()) -> Any:
    """The prompt as the API takes it; images (data URLs) follow the text in the user message, as content parts
    in the API's own shape (chat: ``image_url`` objects; responses: ``input_image``)."""
    if not api.messages:
        return text
    content: Any = text
    if images and api is Api.RESPONSES:
        content = [{"type": "input_text", "text": text}, *({"type": "input_image", "image_url": u} for u in images)]
    elif images:
        content = [{"type": "text", "text": text}, *({"type": "image_url", "image_url": {"url": u}} for u in images)]
    return [*history, {"role": "user", "content": content}]
