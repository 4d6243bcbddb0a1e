"""Each caveat rule fires on its cause and stays silent without it (``planner.evidence.caveats``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from loadgen.errors import ErrorKind
from loadgen.level.client_health import remedy
from loadgen.level.result import LevelResult
from loadgen.level.server_sample import ServerSample
from loadgen.load import Load
from loadgen.results import Results, RunInfo, Target
from loadgen.run.metrics import LevelRecorder
from loadgen.run_settings import RunSettings
from loadgen.wire.records import RequestRecord
from planner.evidence import caveats as rules
from planner.evidence.caveats import measurement_caveats
from planner.reports.report import caveats

ASKED = 32


def answered(tokens: int, *, t: float, per_chunk: int = 1) -> RequestRecord:
    """One streamed answer of ``tokens`` tokens, ``per_chunk`` an event, with usage."""
    events = max(1, tokens // per_chunk)
    times = tuple(t + 0.1 + 0.01 * k for k in range(events))
    return RequestRecord(
        t_intended=t, t_slot=None, t_sent=t, t_first=times[0], t_last=times[-1], t_done=times[-1],
        chunk_times=times, chunk_tokens=None, output_tokens=tokens, output_tokens_estimated=False,
        prompt_tokens=100, error=None, http_status=200,
    )  # fmt: skip


def level(*tokens: int, asked: int = ASKED, per_chunk: int = 1) -> LevelResult:
    recorder = LevelRecorder(Load(kind="concurrency", value=1), window_start=0.0)
    for i, n in enumerate(tokens):
        recorder.started(float(i))
        recorder.add(answered(n, t=float(i), per_chunk=per_chunk), asked_tokens=asked)
    return recorder.finish(float(len(tokens)))


def results(*levels: LevelResult, **settings: Any) -> Results:
    kept = {"prompt_tokens": {"mean": 100}, "output_tokens": {"mean": ASKED}} | settings
    info = RunInfo(id="r", started_at="t", tool_version="0", python="3", platform="L", cpu_count=1, command="run")
    return Results(
        run=info, target=Target("u", "m", "chat"), settings=RunSettings(**kept), levels=levels, complete=True
    )


FULL = level(ASKED, ASKED, ASKED)


def test_short_answers_fire_on_answers_under_their_own_asks_and_not_on_a_spread_answered_in_full() -> None:
    cut = level(20, 24, 28)
    said = rules.short_answers(results(cut, extra_body={"ignore_eos": True}), cut)
    assert said is not None and "averaged 24 tokens where up to 32" in said and "ignore_eos was sent" in said
    assert "short draws" not in said  # the asks were kept: no spread to blame
    # a spread: each request asked its own draw and got it, though the profile's mean is larger
    spread = level(20, 24, 28, asked=24)
    assert rules.short_answers(results(spread, extra_body={"ignore_eos": True}), spread) is None
    assert rules.short_answers(results(FULL), FULL) is None


def test_a_file_without_the_asks_is_compared_with_the_profile_mean() -> None:
    old = replace(level(20, 24, 28), asked_output_tokens=None)
    said = rules.short_answers(results(old), old)
    assert said is not None and "pass --extra-body" in said
    assert rules.short_answers(results(old, output_tokens={"mean": 25}), old) is None


def test_prompt_length_fires_off_the_tokenizer_and_not_within_tolerance() -> None:
    assert rules.prompt_length(results(FULL, prompt_tokens={"mean": 150}), FULL) is not None
    assert rules.prompt_length(results(FULL, prompt_tokens={"mean": 105}), FULL) is None


def test_estimated_tokens() -> None:
    assert rules.estimated_tokens(results(FULL), replace(FULL, tokens_estimated=True)) is not None
    assert rules.estimated_tokens(results(FULL), FULL) is None


def test_late_timers_fire_below_the_client_bound_line_only() -> None:
    late = replace(FULL, loop_lag_p99_ms=FULL.lag_threshold_ms * 2)
    said = rules.late_timers(results(late), late)
    assert said is not None and "upper bounds" in said
    assert rules.late_timers(results(FULL), replace(FULL, loop_lag_p99_ms=FULL.lag_threshold_ms / 2)) is None
    assert rules.late_timers(results(FULL), FULL) is None


def test_empty_answers_and_failures() -> None:
    assert rules.empty_answers(results(FULL), replace(FULL, empty=2)) is not None
    assert rules.empty_answers(results(FULL), FULL) is None
    failed = replace(FULL, errors={ErrorKind.HTTP_5XX: 3})
    assert rules.failed_requests(results(failed), failed) == "c=1: 3 failed requests (http_5xx 3)"
    assert rules.failed_requests(results(FULL), FULL) is None


def test_several_tokens_an_event_fires_on_merged_chunks_and_not_on_one_token_each() -> None:
    merged = level(ASKED, ASKED, per_chunk=4)
    said = rules.several_tokens_an_event(results(merged))
    assert said is not None and said.startswith("c=1: 4.00 output tokens an event")
    assert rules.several_tokens_an_event(results(FULL)) is None


def test_low_speculative_acceptance_is_said_where_events_carry_one_token() -> None:
    server = ServerSample(source="vllm", samples=3, running_mean=1.0, waiting_mean=0.0,
                          spec_draft_tokens=1000.0, spec_accepted_tokens=50.0)  # fmt: skip
    said = rules.several_tokens_an_event(results(replace(FULL, server=server)))
    assert said is not None and "5.0% of 1,000" in said


def test_images_unsaid_and_virtual_time_and_incomplete() -> None:
    assert rules.images_unsaid(results(FULL, images={"count": 2})) is not None
    assert rules.images_unsaid(results(replace(FULL, image_tokens_reported=3), images={"count": 2})) is None
    assert rules.images_unsaid(results(FULL)) is None
    assert rules.virtual_time(results(FULL, virtual_time=True)) is not None
    assert rules.virtual_time(results(FULL)) is None
    assert rules.incomplete(replace(results(FULL), complete=False)) is not None
    assert rules.incomplete(results(FULL)) is None


def test_prefix_reuse_is_said_for_a_replayed_trace_only() -> None:
    trace = {"implied_prefix_share": 0.4, "block_tokens": 16}
    said = rules.prefix_reuse(results(FULL, trace=trace))
    assert said is not None and "40.0%" in said and "no prefix-cache counters" in said
    assert rules.prefix_reuse(results(FULL)) is None


def test_a_clean_level_has_no_caveat_at_all() -> None:
    assert measurement_caveats(results(FULL)) == []


@pytest.mark.parametrize("waited", [0.7, 0.8, 0.9])
def test_the_client_bound_verdict_for_several_levels_is_printed_once(waited: float) -> None:
    def starved(c: int, share: float) -> LevelResult:
        window = 10.0
        base = replace(FULL, load=Load(kind="concurrency", value=c), window_s=window, client_cpu_s=0.2 * window)
        return replace(base, runqueue_wait_s=share * window)

    levels = (starved(2, 0.6), starved(4, waited), starved(8, 0.75))
    said = [c for c in caveats(results(*levels)) if "client-bound" in c]
    assert len(said) == 1, said
    assert said[0].startswith("c=2, c=4, c=8: client-bound"), said[0]
    assert "try --workers" not in said[0] and "a quieter machine" in said[0]


def test_the_client_bound_remedy_follows_its_cause() -> None:
    """Issue 69: 'try --workers' was said to a run of two workers sharing one core."""
    busy = replace(FULL, window_s=10.0, client_cpu_s=9.6, runqueue_wait_s=0.1)
    assert busy.client_bound and remedy(busy).startswith("more workers (one process each")
    two = replace(busy, workers=2, client_cpu_s=19.2)
    assert two.client_bound and remedy(two).startswith("more workers than its 2")
    shared = replace(two, client_cpu_s=8.0, runqueue_wait_s=12.0)  # two processes, one core between them
    assert shared.client_bound and "more workers" not in remedy(shared)
    # issue 71: two workers busy 96% that still waited 29% of their ready time for a core were told
    # "more workers than its 2"; they already share cores
    crowded = replace(two, runqueue_wait_s=8.0)
    assert crowded.client_bound and remedy(crowded).startswith("a quieter machine; more workers cannot help here")
    assert "it waited 29% of the time it was ready to run" in remedy(crowded)


def test_speculative_counters_that_cannot_be_true_are_not_printed() -> None:
    """Issue 70, S12: 'accepted few ... 10000.0% of 270' from a /metrics whose accepted exceeded drafted."""
    lying = ServerSample(source="vllm", samples=3, running_mean=1.0, waiting_mean=0.0,
                         spec_draft_tokens=270.0, spec_accepted_tokens=27000.0)  # fmt: skip
    assert lying.spec_acceptance is None
    assert rules.several_tokens_an_event(results(replace(FULL, server=lying))) is None
