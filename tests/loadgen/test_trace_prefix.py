"""Prefix-faithful trace replay: prompts share text exactly where a trace's ``hash_ids`` share blocks.

Replayed against the simulator's block prefix cache in virtual time, the share of prompt tokens the server's
counters read as cached is the share the trace implies.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import UsageError
from loadgen.inputs.trace import implied_prefix_share, load_trace
from loadgen.results import load

runner = CliRunner()
BLOCK = 32
# (offset s, prompt tokens, output tokens, hash ids): blocks 1 and 2 are a shared system prompt and document,
# block 5 a partial last block; request 5 shares nothing
REQUESTS = [(0.0, 96, 4, [1, 2, 3]), (0.2, 100, 4, [1, 2, 4, 5]), (0.4, 64, 4, [1, 6]),
            (0.6, 128, 4, [1, 2, 3, 7]), (0.8, 40, 4, [8, 9])]  # fmt: skip
IMPLIED = (64 + 32 + 96) / (96 + 100 + 64 + 128 + 40)


# the pattern ten times over 10 s, each copy with its own ids: long enough that the counters' window (scraped
# every 0.2 s) misses no more than a request at either end
REPEATED = [(g + t, p, o, [h + 100 * g for h in ids]) for g in range(10) for t, p, o, ids in REQUESTS]


def mooncake(path: Path, rows: list[tuple[float, int, int, list[int]]] = REQUESTS) -> Path:
    lines = [{"timestamp": round(t * 1000), "input_length": p, "output_length": o, "hash_ids": h}
             for t, p, o, h in rows]  # fmt: skip
    path.write_text("\n".join(json.dumps(line) for line in lines))
    return path


def test_the_implied_share_counts_each_requests_leading_blocks_seen_before(tmp_path: Path) -> None:
    trace = load_trace(mooncake(tmp_path / "t.jsonl"))
    assert trace.hash_ids == tuple(tuple(h) for *_, h in REQUESTS)
    assert implied_prefix_share(trace, BLOCK) == pytest.approx(IMPLIED)
    # a block seen before counts only while every block before it was too: [2] after [1, 2] is not a prefix hit
    late = load_trace(mooncake(tmp_path / "late.jsonl", [(0.0, 64, 1, [1, 2]), (1.0, 64, 1, [3, 2])]))
    assert implied_prefix_share(late, BLOCK) == 0.0
    # a partial last block counts the tokens it holds
    partial = load_trace(mooncake(tmp_path / "p.jsonl", [(0.0, 40, 1, [1, 2]), (1.0, 40, 1, [1, 2])]))
    assert implied_prefix_share(partial, BLOCK) == pytest.approx(40 / 80)


def test_a_trace_without_hash_ids_implies_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time_s,prompt_tokens,output_tokens\n0,10,2\n1,10,2\n")
    trace = load_trace(path)
    assert trace.hash_ids is None and implied_prefix_share(trace, BLOCK) is None


@pytest.mark.parametrize(
    ("hashes", "message"),
    [("[1, -2]", "hash_ids: expected whole numbers from 0 to 2\\*\\*63-1"), ('"abc"', "hash_ids: expected a list")],
)
def test_bad_hash_ids_are_one_line_naming_the_line(tmp_path: Path, hashes: str, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(f'{{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": {hashes}}}\n')
    with pytest.raises(UsageError, match=rf"t.jsonl:1: {message}"):
        load_trace(path)


def replay(tmp_path: Path, *extra: str) -> tuple[object, str]:
    out = tmp_path / "o.json"
    args = ["run", "--url", "sim", "--virtual-time", "--api", "completions", "--trace",
            str(mooncake(tmp_path / "t.jsonl", REPEATED)), "--trace-block-tokens", str(BLOCK), "--scrape-metrics", "on",
            "--warmup", "0", "-o", str(out), *extra]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return load(out), result.stderr


def test_a_replay_shares_prompt_blocks_where_the_trace_does_and_the_server_serves_what_it_implies(
    tmp_path: Path,
) -> None:
    results, stderr = replay(tmp_path)
    level = results.levels[0]  # type: ignore[attr-defined]
    assert results.settings.trace["implied_prefix_share"] == pytest.approx(IMPLIED, abs=1e-4)  # type: ignore[attr-defined]
    assert level.server is not None
    # the simulator's 16-token blocks tile the trace's 32-token ones: every shared block is found, no other
    assert level.server.prefix_cache_hit_share == pytest.approx(IMPLIED, abs=0.02)
    said = " ".join(stderr.split())
    assert "trace prefix reuse: its hash_ids (32-token blocks) imply 44.9% of the prompt tokens" in said
    assert "the server's prefix-cache counters read r=5/s 4" in said


def test_a_rerun_finds_none_of_the_earlier_runs_blocks(tmp_path: Path) -> None:
    # the same trace twice against one simulator: the second replay's blocks are its own (a per-run salt)
    trace = mooncake(tmp_path / "t.jsonl", REPEATED)
    profile = tmp_path / "p.yaml"
    profile.write_text(f"api: completions\nload: {{mode: trace, trace: {trace}, trace_block_tokens: {BLOCK}, "
                       "levels: [1, 0.5], warmup_s: 0}\nstop: {stop_on_saturation: false}\n")  # fmt: skip
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "--scrape-metrics", "on",
                                 "--quiet", "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    first, second = load(out).levels
    assert first.server is not None and second.server is not None
    assert first.server.prefix_cache_hit_share == pytest.approx(IMPLIED, abs=0.02)
    assert second.server.prefix_cache_hit_share == pytest.approx(IMPLIED, abs=0.02)


def test_block_tokens_belong_to_a_trace(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("load: {mode: open, levels: [1], trace_block_tokens: 16}\n")
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "load.trace_block_tokens: the tokens a trace's hash_ids name" in result.stderr


def test_one_token_blocks_need_no_deck_each() -> None:
    """Issue 70, S15: ``--trace-block-tokens 1`` with 10^6 hash ids in a row took 239 s of CPU to build one
    request: a seeded generator for each one-word block. A block of one word is its mark alone; a 200,000-block
    request builds in about a second (it took ~48 s), each block its own mark."""
    from loadgen.api import Api
    from loadgen.run.requests import RequestFactory, Workload

    blocks = tuple(range(200_000))
    workload = Workload(
        api=Api.COMPLETIONS, model="m", lengths=((len(blocks), 1),), prompt_blocks=(blocks,), block_tokens=1
    )
    factory = RequestFactory(workload, seed=0)
    prompt = json.loads(factory.next().body)["prompt"].split()
    assert len(prompt) == len(blocks) and len(set(prompt)) == len(blocks)
    again = json.loads(factory.next().body)["prompt"].split()
    assert again == prompt  # the same blocks, the same text: what a prefix cache serves
