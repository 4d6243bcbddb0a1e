"""Issue 58: streams of 2026. A reasoning model's first answer token is timed apart from its first token
(time to first output token, ``ttfo``); its reasoning tokens are counted; a turn that answers with a tool
call is a timed, completed turn. Checked against the simulator's known law, in virtual time."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from loadgen.api import Api
from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.quantity import Metric
from loadgen.results import save_atomic
from loadgen.sim.openai_app import SimOptions
from loadgen.wire.sse import parse_chunk
from tests.virtual import run_virtual

runner = CliRunner()
# ITL 10 ms (one client, nothing else in the batch); TTFT 50 ms: the step that prefills 100 prompt tokens
LAW = EngineConfig(base_ms=10.0, per_seq_ms=0.0, prefill_ms_per_token=0.4, max_num_seqs=8)


def _sweep(
    api: str, mode: str, levels: list[float], *, output_tokens: int = 30, duration_s: float, warmup_s: float, seed: int
) -> Any:
    """A sweep of 100-token prompts on the simulator (its law, reasoning and tool calls come with ``SimOptions``)."""
    return parse_profile(
        {
            "schema_version": 1,
            "name": api,
            "target": "sim",
            "api": api,
            "workload": {"prompt_tokens": 100, "output_tokens": output_tokens},
            "load": {"mode": mode, "levels": levels, "duration_s": duration_s, "warmup_s": warmup_s},
            "seed": seed,
        },
        "test",
    )


def _profile(output_tokens: int, concurrency: int = 1, duration_s: float = 6) -> Any:
    return _sweep(
        "chat", "closed", [concurrency], output_tokens=output_tokens, duration_s=duration_s, warmup_s=1, seed=3
    )


def test_a_reasoning_phase_delays_the_first_answer_token_not_the_first_token() -> None:
    """The issue's case: 20 reasoning tokens, then 10 of answer, ITL 10 ms, TTFT 50 ms."""
    results, records = run_virtual(_profile(30), sim=SimOptions(engine=LAW, reasoning_tokens=20))
    level = results.levels[0]
    assert level.completed >= 10 and not level.errors
    assert level.percentile_ms(Metric.TTFT, 50) == pytest.approx(50, abs=2)
    assert level.percentile_ms(Metric.TTFO, 50) == pytest.approx(250, abs=3)  # 50 + 20 steps of 10 ms
    assert level.percentile_ms(Metric.TPOT, 50) == pytest.approx(10, abs=0.5)  # reasoning is output to the step law
    assert level.reasoning_tokens == 20 * level.completed and level.reasoning_counted == 0  # from usage
    assert level.summary()["reasoning_tokens_mean"] == 20
    done = next(r for r in records if r.ok)
    assert done.reasoning_tokens == 20 and done.reasoning_reported and done.output_tokens == 30


def test_a_plain_stream_has_its_first_output_token_at_its_first_token() -> None:
    results, _ = run_virtual(_profile(8), sim=SimOptions(engine=LAW))
    level = results.levels[0]
    assert level.percentile_ms(Metric.TTFO, 50) == level.percentile_ms(Metric.TTFT, 50)
    assert level.reasoning_tokens == 0 and level.tool_call_turns == 0


def test_a_turn_that_answers_with_a_tool_call_is_completed_and_timed() -> None:
    results, records = run_virtual(_profile(12), sim=SimOptions(engine=LAW, tool_call_share=1.0))
    level = results.levels[0]
    assert level.completed >= 10 and not level.errors and level.empty == 0
    assert level.tool_call_turns == level.completed
    assert level.percentile_ms(Metric.TTFT, 50) == pytest.approx(50, abs=2)
    assert level.percentile_ms(Metric.TPOT, 50) == pytest.approx(10, abs=0.5)  # not inflated by missing events
    assert level.histograms[Metric.ITL].count > 0
    assert all(r.tool_call and r.t_first_output == r.t_first for r in records if r.ok)


def test_reasoning_without_usage_is_counted_from_its_events() -> None:
    thought = parse_chunk('{"id":"x","choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}', Api.CHAT)
    answer = parse_chunk('{"id":"x","choices":[{"index":0,"delta":{"content":"A","reasoning_content":""}}]}', Api.CHAT)
    call = parse_chunk(
        '{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}',
        Api.CHAT,
    )
    assert thought.token and thought.reasoning and not thought.tool_call
    assert answer.token and not answer.reasoning  # answer text beside an empty reasoning field is the answer
    assert call.token and call.tool_call and not call.reasoning
    usage = parse_chunk(
        '{"id":"x","choices":[],"usage":{"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":4}}}',
        Api.CHAT,
    )
    assert usage.reasoning_tokens == 4


def test_a_gate_and_an_slo_read_the_time_to_first_output_token(tmp_path: Any) -> None:
    results, _ = run_virtual(
        _profile(30, concurrency=4, duration_s=15), sim=SimOptions(engine=LAW, reasoning_tokens=20)
    )
    path = tmp_path / "reasoning.json"
    save_atomic(results, path)
    passed = runner.invoke(app, ["gate", str(path), "--require", "ttfo_p95<600ms", "--require", "ttft_p95<400ms"])
    assert passed.exit_code == 0, passed.output
    failed = runner.invoke(app, ["gate", str(path), "--require", "ttfo_p95<200ms"])
    assert failed.exit_code == 1 and "ttfo_p95" in failed.output


def test_a_profile_gives_the_simulator_its_reasoning_phase_and_tool_calls(tmp_path: Any) -> None:
    """Issue 73: only ``serve-sim`` (real time) had the flags; a profile's ``target.sim`` now carries them, so a
    virtual-time sweep from the command line thinks before it answers, and calls tools, as the flags would."""
    results = tmp_path / "r.json"
    profile = {
        "name": "thinking",
        "target": {"sim": {"base_ms": 10, "per_seq_ms": 0, "reasoning_tokens": 12, "tool_call_share": 1.0}},
        "workload": {"prompt_tokens": 16, "output_tokens": 30},
        "load": {"mode": "closed", "levels": [2], "duration_s": 5, "warmup_s": 1},
    }
    (tmp_path / "p.yaml").write_text(json.dumps(profile))
    swept = runner.invoke(app, ["sweep", "--profile", str(tmp_path / "p.yaml"), "--virtual-time", "-o", str(results)])
    assert swept.exit_code == 0, swept.output
    summary = json.loads(results.read_text())["levels"][0]["summary"]
    assert summary["reasoning_tokens_mean"] == 12 and summary["tool_call_turns"] == summary["completed"]
    assert summary["ttfo_ms"]["p50"] >= summary["ttft_ms"]["p50"] + 12 * 10 - 1  # twelve 10 ms steps of thought
    plain = {**profile, "target": {"sim": {"base_ms": 10, "per_seq_ms": 0}}}
    (tmp_path / "p.yaml").write_text(json.dumps(plain))
    assert runner.invoke(app, ["sweep", "--profile", str(tmp_path / "p.yaml"), "--virtual-time", "-o", str(results)])
    summary = json.loads(results.read_text())["levels"][0]["summary"]
    assert summary.get("reasoning_tokens_mean") is None and summary["ttfo_ms"]["p50"] == summary["ttft_ms"]["p50"]
    bad = {**profile, "target": {"sim": {"reasoning_tokens": -1}}}
    (tmp_path / "p.yaml").write_text(json.dumps(bad))
    refused = runner.invoke(app, ["sweep", "--profile", str(tmp_path / "p.yaml"), "--virtual-time", "-o", str(results)])
    assert refused.exit_code == 2 and "target.sim.reasoning_tokens" in refused.output, refused.output


def test_a_plan_sizes_replicas_for_an_slo_on_the_first_output_token(tmp_path: Any) -> None:
    """A reasoning model thinks 20 tokens before its answer: the sizing simulation judges ``ttfo_p95`` as
    TTFT plus the reasoning share's steps. The replicas it recommends hold the SLO on the true law, one
    fewer does not (open-loop runs of the simulator at the per-replica rate)."""
    law = EngineConfig(base_ms=10.0, per_seq_ms=0.5, prefill_ms_per_token=0.4, max_num_seqs=32)
    results, _ = run_virtual(
        _sweep("chat", "closed", [1, 4, 16], duration_s=30, warmup_s=2, seed=3),
        sim=SimOptions(engine=law, reasoning_tokens=20),
    )
    path = tmp_path / "sweep.json"
    save_atomic(results, path)
    ttfo = [lv.percentile_ms(Metric.TTFO, 95) or 0.0 for lv in results.levels]
    assert ttfo == sorted(ttfo) and ttfo[0] > 200  # 20 steps of thinking before the answer, growing with load
    args = ["plan", str(path), "--slo", "ttfo_p95<1s", "--slo", "tpot_p95<30ms", "--qps", "20", "--json"]
    planned = runner.invoke(app, args)
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    assert [e["key"] for e in plan["simulated"]["estimates"]] == ["ttfo_p95_ms"]
    replicas, batch = plan["replicas"], plan["max_batch"]
    served = dataclasses.replace(law, max_num_seqs=batch)
    for count, holds in ((replicas, True), (replicas - 1, False)):
        run, _ = run_virtual(
            _sweep("chat", "open", [20 / count], duration_s=60, warmup_s=2, seed=4),
            sim=SimOptions(engine=served, reasoning_tokens=20),
        )
        measured = run.levels[0].percentile_ms(Metric.TTFO, 95)
        assert measured is not None and (measured <= 1000) == holds, (count, measured)


def _responses_profile(levels: list[float]) -> Any:
    return _sweep("responses", "closed", levels, duration_s=6, warmup_s=1, seed=3)


def test_the_responses_api_streams_typed_events_timed_as_chat_is() -> None:
    """Issue 58 item 3: ``--api responses``: input and max_output_tokens in, response.*.delta events out,
    usage from response.completed; the same numbers as a chat stream of the same law."""
    results, records = run_virtual(_responses_profile([1]), sim=SimOptions(engine=LAW, reasoning_tokens=20))
    level = results.levels[0]
    assert level.completed >= 10 and not level.errors and not level.tokens_estimated
    assert level.percentile_ms(Metric.TTFT, 50) == pytest.approx(50, abs=2)
    assert level.percentile_ms(Metric.TTFO, 50) == pytest.approx(250, abs=3)
    assert level.percentile_ms(Metric.TPOT, 50) == pytest.approx(10, abs=0.5)
    done = next(r for r in records if r.ok)
    assert done.output_tokens == 30 and done.prompt_tokens == 100 and done.reasoning_tokens == 20
    assert done.response_id is not None and done.response_id.startswith("resp_")
    tools, _ = run_virtual(_responses_profile([1]), sim=SimOptions(engine=LAW, tool_call_share=1.0))
    assert tools.levels[0].tool_call_turns == tools.levels[0].completed > 0


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ('{"type":"response.failed","response":{"id":"r","error":{"message":"boom"}}}', "boom"),
        ('{"type":"error","code":"x","message":"rate limited"}', "rate limited"),
    ],
)
def test_a_responses_stream_that_fails_in_stream_names_the_servers_words(event: str, expected: str) -> None:
    assert parse_chunk(event, Api.RESPONSES).error == expected


def test_a_responses_event_without_a_type_is_malformed() -> None:
    from loadgen.wire.sse import MalformedChunk

    with pytest.raises(MalformedChunk):
        parse_chunk('{"delta":"x"}', Api.RESPONSES)
    ended = parse_chunk(
        '{"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":3,"output_tokens":7,'
        '"output_tokens_details":{"reasoning_tokens":2}}}}',
        Api.RESPONSES,
    )
    assert (ended.finish_reason, ended.completion_tokens, ended.prompt_tokens, ended.reasoning_tokens) == (
        "completed",
        7,
        3,
        2,
    )


@pytest.mark.parametrize(("events", "said"), [(4, True), (12, False)])
def test_several_tokens_an_event_are_said_not_passed_off_as_per_token_gaps(events: int, said: bool) -> None:
    """Issue 58: vLLM's Responses stream sends no delta for a token that does not decode to text yet (9-11
    events for 16 tokens on the CPU engine's tiny model): ITL is then per event, and the caveat says so."""
    from loadgen.load import Load
    from loadgen.results import Results, RunInfo, Target
    from loadgen.run.metrics import LevelRecorder
    from loadgen.run_settings import RunSettings
    from loadgen.wire.records import RequestRecord
    from planner.reports.report import caveats

    recorder = LevelRecorder(Load(kind="concurrency", value=1), window_start=0.0)
    for i in range(3):
        times = tuple(i + 0.1 + 0.03 * k for k in range(events))
        recorder.add(
            RequestRecord(
                t_intended=i,
                t_slot=None,
                t_sent=i,
                t_first=times[0],
                t_last=times[-1],
                t_done=times[-1],
                chunk_times=times,
                chunk_tokens=None,
                output_tokens=12,
                output_tokens_estimated=False,
                prompt_tokens=8,
                error=None,
                http_status=200,
            )
        )
    level = recorder.finish(3.0)
    results = Results(
        run=RunInfo(id="r", started_at="t", tool_version="0", python="3", platform="L", cpu_count=1, command="run"),
        target=Target("u", "m", "responses"),
        settings=RunSettings(),
        levels=(level,),
        complete=True,
    )
    notes = [c for c in caveats(results) if "tokens an event" in c]
    assert bool(notes) == said
    if said:
        assert "3.00 output tokens an event" in notes[0] and "ITL is per event (p50 30.0 ms)" in notes[0]
        assert "per token it is about 10.0 ms" in notes[0]
