"""Multi-turn sessions: the history grows turn by turn, and the simulator's prefix cache spares its prefill.

In virtual time (``tests/virtual.py``): a turn's TTFT is then exactly what the simulator's prefill law
says, whatever else the machine is doing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.inputs.profile import LoadSpec, Profile, WorkloadSpec
from loadgen.lengths import Lengths
from loadgen.results import load
from loadgen.sim.openai_app import SimOptions
from loadgen.sim.prefix_cache import PrefixCache
from loadgen.wire.records import RequestRecord
from tests.virtual import run_virtual

PROMPT, OUTPUT = 100, 8


def converse(prefix_cache: bool) -> tuple[dict[str, dict[str, float]], list[RequestRecord]]:
    # 1 ms of prefill a prompt token: a turn's TTFT shows how much of its prompt was prefilled
    options = SimOptions(engine=EngineConfig(prefill_ms_per_token=1.0), prefix_cache=prefix_cache)
    profile = Profile(
        name="conversations",
        workload=WorkloadSpec(prompt_tokens=Lengths(PROMPT), output_tokens=Lengths(OUTPUT), turns=3),
        load=LoadSpec(levels=(2,), duration_s=None, requests=18, warmup_s=0),
    )
    results, records = run_virtual(profile, options)
    by_turn = results.levels[0].summary()["by_turn"]
    return {t: v["ttft_ms"] for t, v in by_turn.items()}, records


def test_each_turn_sends_the_whole_history_back() -> None:
    _, rows = converse(prefix_cache=True)
    by_turn = {r.turn: r.prompt_tokens for r in rows}
    # turn k: k prompts and k-1 answers (the server's own count of what it was sent)
    assert by_turn == {1: PROMPT, 2: 2 * PROMPT + OUTPUT, 3: 3 * PROMPT + 2 * OUTPUT}
    assert sorted({r.turn or 0 for r in rows}) == [1, 2, 3] and all(r.error is None for r in rows)


def test_the_prefix_cache_keeps_later_turns_as_fast_as_the_first() -> None:
    cached, _ = converse(prefix_cache=True)
    full, _ = converse(prefix_cache=False)
    assert set(cached) == {"1", "2", "3"} and cached["3"]["count"] == 6
    # without the cache turn 3 prefills 316 tokens instead of 100: about 216 ms more
    assert full["3"]["p50"] - full["1"]["p50"] > 150
    assert cached["3"]["p50"] < cached["1"]["p50"] + 50
    assert cached["3"]["p50"] < full["3"]["p50"] - 150


def test_the_cache_finds_a_prompts_leading_blocks_and_forgets_the_least_recently_used() -> None:
    cache = PrefixCache(capacity_blocks=3, block=2)
    history = ["hello", "there", "how", "are", "you"]  # two full blocks, a word left over
    cache.remember(history)
    assert cache.cached_words([*history, "more"]) == 4 and cache.cached_words(["hello", "here", "how", "are"]) == 0
    # a block matches only after the same prefix: the second block alone is not found
    assert cache.cached_words(["how", "are", "you"]) == 0
    assert cache.lookup([*history, "more"], prompt_tokens=6) == 4 and (cache.queried_tokens, cache.hit_tokens) == (6, 4)
    assert cache.lookup(["hello", "there"], prompt_tokens=2) == 1  # the last prompt token is always prefilled
    # two more blocks: the least recently used goes ("how are": "hello there" was found since)
    cache.remember(["a", "b", "c", "d"])
    assert cache.cached_words(history) == 2 and cache.cached_words(["a", "b", "c", "d"]) == 4


@pytest.mark.parametrize("extra", [["--rate", "2"], ["--api", "completions", "--concurrency", "2"]])
def test_turns_need_closed_loop_chat(extra: list[str], tmp_path: Path) -> None:
    args = ["run", "--url", "sim", "--turns", "2", "--requests", "4", *extra, "-o", str(tmp_path / "o.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "--turns" in result.stderr


def test_a_profile_sweeps_conversations(tmp_path: Path) -> None:
    profile = tmp_path / "chat.yaml"
    profile.write_text(
        "target: {sim: {}}\napi: chat\nworkload: {prompt_tokens: 20, output_tokens: 4, turns: 2, think_time_s: 0.01}\n"
        "load: {levels: [2], requests: 8, warmup_s: 0}\n"
    )
    out = tmp_path / "s.json"
    result = CliRunner().invoke(app, ["sweep", "--profile", str(profile), "-o", str(out), "--quiet", "--virtual-time"])
    assert result.exit_code == 0, result.output
    by_turn = load(out).levels[0].summary()["by_turn"]
    assert set(by_turn) == {"1", "2"} and set(by_turn["2"]) == {"ttft_ms", "tpot_ms", "e2e_ms"}


@pytest.mark.parametrize(("turns", "share"), [(3, (108 + 216) / (100 + 208 + 316)), (1, 0.0)])
def test_the_servers_prefix_cache_counters_say_how_much_prompt_it_served(
    turns: int, share: float, tmp_path: Path
) -> None:
    # vLLM's prefix_cache_queries / _hits (the simulator's by the same names), in tokens: of three turns'
    # prompts (100, 208, 316 tokens) the cache holds the history of the second and third; one-turn prompts
    # are unique (a nonce first), so none is served from the cache.
    out = tmp_path / "o.json"
    args = ["run", "--url", "sim", "--virtual-time", "--api", "chat", "--turns", str(turns), "--concurrency", "2",
            "--requests", "36", "--prompt-tokens", str(PROMPT), "--max-tokens", str(OUTPUT), "--scrape-metrics", "on",
            "-o", str(out), "--quiet"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    server = load(out).levels[0].server
    assert server is not None and server.prefix_cache_queried
    assert server.prefix_cache_hit_share == pytest.approx(share, abs=0.08)
