"""Synthetic prompts sized to a tokenizer loadgen never sees: the calibration probes, the dealt words,
the dithered rounding and the correction from usage, against tokenizers whose counts are known here.

A tokenizer is a function of the request's text; each has what made the old two-sample probe miss
(issue 30: 64 asked, 49 realised): words of different lengths, a nonce that costs more than a word,
a template, and one that joins neighbouring words.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from loadgen.api import Api
from loadgen.lengths import Lengths
from loadgen.run.requests import (
    PREPARED_AHEAD,
    SETTLED_AFTER,
    VOCABULARY,
    PreparedRequest,
    PromptCalibration,
    RequestFactory,
    Workload,
)

Tokenizer = Callable[[str], int]


def word_cost(word: str) -> int:
    """A byte-level-BPE-like count: short words one token, longer ones several; a nonce ~one per 2 chars."""
    return 1 + len(word) // 3 if not word.startswith("r") or word in VOCABULARY else 2 + len(word) // 2


def bpe_like(template: int) -> Tokenizer:
    return lambda text: template + sum(word_cost(w) for w in text.split())


def joining(template: int) -> Tokenizer:
    """Counts one token less for each adjacent pair of equal first letters: not a sum over words."""

    def count(text: str) -> int:
        words = text.split()
        joined = sum(1 for a, b in itertools.pairwise(words) if a[0] == b[0])
        return template + sum(word_cost(w) for w in words) - joined

    return count


def prompt_text(prepared: PreparedRequest) -> str:
    body = json.loads(prepared.body)
    return str(body["prompt"] if "prompt" in body else body["messages"][-1]["content"])


def calibrated(workload: Workload, tokenizer: Tokenizer) -> Workload:
    factory = RequestFactory(workload, seed=7)
    once, twice = (tokenizer(prompt_text(factory.calibration_probe(c))) for c in (1, 2))
    calibration = PromptCalibration.from_probes(once, twice)
    assert calibration is not None
    return replace(workload, calibration=calibration)


def realised_mean(workload: Workload, tokenizer: Tokenizer, requests: int, *, seed: int = 1) -> float:
    factory = RequestFactory(workload, seed)
    counts = []
    for _ in range(requests):
        prepared = factory.next()
        counts.append(tokenizer(prompt_text(prepared)))
        factory.observe(prepared, counts[-1])
    return float(np.mean(counts))


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("asked", [64, 256, 1000])
@pytest.mark.parametrize("tokenizer", [bpe_like(0), bpe_like(18), joining(18)], ids=["bpe", "template", "joins"])
def test_prompts_average_the_length_asked(api: str, asked: int, tokenizer: Tokenizer) -> None:
    workload = calibrated(Workload(api=Api(api), model="m", prompt_tokens=Lengths(asked)), tokenizer)
    mean = realised_mean(workload, tokenizer, 60)
    assert abs(mean - asked) <= max(0.02 * asked, 2.0), mean


def test_the_probes_measure_the_vocabularys_mean_exactly() -> None:
    tokenizer = bpe_like(11)
    workload = Workload(api=Api.COMPLETIONS, model="m")
    calibration = calibrated(workload, tokenizer).calibration
    assert calibration is not None
    assert calibration.tokens_per_word == pytest.approx(np.mean([word_cost(w) for w in VOCABULARY]), abs=1e-9)


def test_usage_corrects_what_the_probe_could_not_see() -> None:
    # The server counts 9 tokens more than the probes did (another template on requests): the first
    # requests are long, then usage pulls the length back to the one asked.
    workload = calibrated(Workload(api=Api.CHAT, model="m", prompt_tokens=Lengths(128)), bpe_like(0))
    factory = RequestFactory(workload, seed=3)
    counts = []
    for _ in range(40):
        prepared = factory.next()
        counts.append(bpe_like(9)(prompt_text(prepared)))
        factory.observe(prepared, counts[-1])
    assert np.mean(counts[:1]) > 128 + 5
    assert np.mean(counts[10:]) == pytest.approx(128, abs=2.5)


def test_bodies_built_ahead_still_follow_the_usage_correction() -> None:
    # Once usage has settled the length correction, bodies are built up to PREPARED_AHEAD at a time:
    # a server that starts counting 6 more tokens a prompt later in the run still pulls the length back.
    workload = calibrated(Workload(api=Api.COMPLETIONS, model="m", prompt_tokens=Lengths(128)), bpe_like(0))
    factory = RequestFactory(workload, seed=4)
    counts = []
    for k in range(SETTLED_AFTER + 20 * PREPARED_AHEAD):
        prepared = factory.next()
        counts.append(bpe_like(0 if k < SETTLED_AFTER else 6)(prompt_text(prepared)))
        factory.observe(prepared, counts[-1])
    assert np.mean(counts[SETTLED_AFTER : SETTLED_AFTER + PREPARED_AHEAD]) > 128 + 4  # built before the change
    assert np.mean(counts[-4 * PREPARED_AHEAD :]) == pytest.approx(128, abs=2.5)


def test_words_are_dealt_each_once_per_vocabulary() -> None:
    workload = Workload(api=Api.COMPLETIONS, model="m", prompt_tokens=Lengths(17), unique_prompts=False)
    factory = RequestFactory(workload, seed=5)
    words = [w for _ in range(4 * len(VOCABULARY)) for w in prompt_text(factory.next()).split()]
    assert set(Counter(words).values()) == {4 * 17}


def test_a_calibration_probe_has_every_word_as_many_times_as_asked_after_the_nonce() -> None:
    factory = RequestFactory(Workload(api=Api.COMPLETIONS, model="m"), seed=2)
    probe = factory.calibration_probe(2)
    first, *rest = prompt_text(probe).split()
    assert first.startswith("r") and first not in VOCABULARY and probe.max_tokens == 1
    assert Counter(rest) == Counter(VOCABULARY * 2) and probe.words == 1 + 2 * len(VOCABULARY)


def test_a_conversations_later_turns_do_not_correct_the_sizing() -> None:
    # Their usage counts the whole history: it says nothing about how long the new prompt was.
    workload = Workload(api=Api.CHAT, model="m", prompt_tokens=Lengths(32), turns=2)
    factory = RequestFactory(workload, seed=1)
    first = factory.next()
    later = factory.next(({"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}))
    assert first.words == 32 and later.words is None


def test_the_calibration_refuses_counts_no_tokenizer_gives() -> None:
    assert PromptCalibration.from_probes(300, 300) is None
    assert PromptCalibration.from_probes(300, 200) is None


def test_a_rerun_with_the_same_seed_sends_the_same_prompts_under_new_nonces() -> None:
    # vLLM keeps every prompt it has prefilled (automatic prefix caching): a second sweep with the same
    # seed sent the first one's prompts again, and its prefill at 512 tokens read 8.3 ms against 16.5.
    # The seed fixes the lengths and the words; the nonce is the run's own, so no run repeats another's prompt.
    workload = Workload(api=Api.COMPLETIONS, model="m", prompt_tokens=Lengths(64))
    first, *words_a = prompt_text(RequestFactory(workload, seed=11).next()).split()
    second, *words_b = prompt_text(RequestFactory(workload, seed=11).next()).split()
    assert words_a == words_b and first != second
    assert first.startswith("r") and second.startswith("r")
    one_run = RequestFactory(workload, seed=11)
    nonces = {prompt_text(one_run.next()).split()[0] for _ in range(200)}
    assert len(nonces) == 200
