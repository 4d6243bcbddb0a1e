"""What a results file's numbers do not say by themselves: one small rule per caveat (pure).

Each rule reads the evidence and returns its sentence, or None where its cause is absent: a level rule
reads one level (and the run's settings), a run rule the whole file. The reports only render what
``measurement_caveats`` returns; the trust verdicts (``planner.evidence.verdicts``) are the other half,
the causes that make a level untrusted. ``tests/planner/test_caveat_rules.py`` shows each rule firing
on its cause and silent without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from loadgen.api import RERANK_QUERY_TOKENS, Api
from loadgen.level.aggregates import mean_output_tokens, mean_prompt_tokens
from loadgen.level.client_health import CORE_SHARED
from loadgen.level.result import LevelResult
from loadgen.level.summary import MULTI_TOKEN_EVENTS
from loadgen.quantity import Metric
from loadgen.results import Results

PROMPT_TOLERANCE: Final = 0.10  # realised prompt tokens this far from the request: said out loud
SHORT_ANSWERS: Final = 0.90  # answers shorter than this share of what was asked on average: stopped early

LevelRule = Callable[[Results, LevelResult], "str | None"]
RunRule = Callable[[Results], "str | None"]


def virtual_time(results: Results) -> str | None:
    """A virtual-time run measured the simulator's law, not a client over a network."""
    if not results.settings.virtual_time:
        return None
    return ("measured in virtual time (--virtual-time): the simulator's law, exactly, with no client cost "
            "and no network; a real endpoint's numbers need a real run")  # fmt: skip


def images_unsaid(results: Results) -> str | None:
    """Requests carried images and the server did not say their tokens apart: the text's length is unchecked."""
    images = results.settings.images
    if not images or all(lv.image_tokens_reported for lv in results.levels if lv.completed):
        return None
    return (f"each request carried {images.get('count')} image(s): the server's prompt tokens include "
            "theirs and it did not say them apart, so the text's own length is not checked")  # fmt: skip


def prompt_length(results: Results, level: LevelResult) -> str | None:
    """Prompts came out another length than asked (the server's tokenizer counts otherwise)."""
    if not results.settings.prompt_mean:
        return None
    realised = mean_prompt_tokens([level])
    if realised and results.settings.images:  # the text's length: the images' tokens said apart, or unknown
        realised = realised - level.image_tokens / level.image_tokens_reported if level.image_tokens_reported else None
    low, high = _asked_prompt(results, level)
    if not realised or low * (1 - PROMPT_TOLERANCE) <= realised <= high * (1 + PROMPT_TOLERANCE):
        return None
    shown = f"{low:g}" if low == high else f"{low:.0f} to {high:.0f}"
    return (f"{level.load.label}: prompts averaged {realised:.0f} tokens where {shown} were asked (the server's "
            "tokenizer); the results describe the realised length")  # fmt: skip


def _asked_prompt(results: Results, level: LevelResult) -> tuple[float, float]:
    """The prompt tokens asked of each request (or input), as a range: a rerank input is a document and the query,
    which a cross-encoder reads once a document and a bi-encoder once a request (the usage counts what it read)."""
    asked = results.settings.prompt_mean or 0.0
    if results.settings.api != Api.RERANK:
        return asked, asked
    return asked + RERANK_QUERY_TOKENS / (level.load.batch or 1), asked + RERANK_QUERY_TOKENS


def short_answers(results: Results, level: LevelResult) -> str | None:
    """Answers averaged well under what the same requests asked for: the server stopped early.

    Compared with the requests' own asks (each draw of a length spread, kept by the run); a file that did
    not keep them is compared with the profile's mean, which short draws alone can undercut."""
    answered = mean_output_tokens([level])
    kept = level.asked_output_tokens or None  # 0: a level built without its requests' asks
    asked = kept / level.completed if kept is not None and level.completed else results.settings.output_mean
    if not asked or not answered or answered >= SHORT_ANSWERS * asked:
        return None
    if (results.settings.extra_body or {}).get("ignore_eos"):
        why = ("ignore_eos was sent, so the server either does not honour it or caps the answers (max_model_len, "
               "its own max_tokens limit)" + ("" if kept is not None else "; a length spread's short draws count too"))  # fmt: skip
    else:
        why = (
            "the server stopped early (end of sequence); for fixed lengths pass --extra-body "
            "'{\"ignore_eos\": true}' (vLLM, SGLang)"
        )
    return f"{level.load.label}: answers averaged {answered:.0f} tokens where up to {asked:.0f} were asked: {why}"


def estimated_tokens(results: Results, level: LevelResult) -> str | None:
    """The server sent no usage: output tokens were counted from chunks."""
    if not level.tokens_estimated:
        return None
    return f"{level.load.label}: output tokens were counted from chunks (no usage from the server)"


def late_timers(results: Results, level: LevelResult) -> str | None:
    """The generator's loop ran timers late, below the client-bound line: the tails are upper bounds."""
    lag = level.loop_lag_p99_ms
    if lag is None or lag <= level.lag_threshold_ms or level.client_bound:
        return None
    wait = level.core_wait_ratio
    shared = (f", as it shared its core (it waited {wait:.0%} of the time it was ready to run for a core "
              "another process held)" if wait is not None and wait >= CORE_SHARED else "")  # fmt: skip
    return (f"{level.load.label}: the generator's event loop ran timers {lag:.0f} ms late at p99{shared}: chunk "
            "timestamps can be that late in bursts (tail percentiles are upper bounds; the medians and the "
            "throughput hold)")  # fmt: skip


def empty_answers(results: Results, level: LevelResult) -> str | None:
    """Successes with no output token: counted as completed, timed in nothing."""
    if not level.empty:
        return None
    return (f"{level.load.label}: {level.empty} requests succeeded without streaming any output token: they "
            "count as completed but are in no TTFT, TPOT or ITL (check ignore_eos or the prompt)")  # fmt: skip


def failed_requests(results: Results, level: LevelResult) -> str | None:
    """Failures, by kind (above the untrusted rate, the verdicts say it too)."""
    if not level.failed:
        return None
    kinds = ", ".join(f"{k.value} {n}" for k, n in sorted(level.errors.items()))
    return f"{level.load.label}: {level.failed} failed requests ({kinds})"


def several_tokens_an_event(results: Results) -> str | None:
    """Events that carried several tokens each (speculative decoding, batched chunks): what ITL then measured.
    Said once, of the first such level, naming the others; else a speculative server's low acceptance."""
    multi = [
        (lv, per_event)
        for lv in results.levels
        if not lv.tokens_estimated
        and (per_event := tokens_per_event(lv)) is not None
        and per_event > MULTI_TOKEN_EVENTS
    ]
    if multi:
        first, per_event = multi[0]
        also = f" (likewise at {', '.join(lv.load.label for lv, _ in multi[1:])})" if len(multi) > 1 else ""
        return _multi_token_note(first, per_event) + also
    drafted = [lv for lv in results.levels if lv.server is not None and lv.server.spec_acceptance is not None]
    return _speculation_note(drafted) if drafted else None


def tokens_per_event(level: LevelResult) -> float | None:
    """Output tokens per token event: counted where the run counted its events, else from the ITL gaps (a file
    written before the count: each request's events are its gaps plus its first); None for a table imported from
    another tool, whose levels carry no gaps to count (200 tokens an event read off a means-only table before)."""
    if level.tokens_per_event is not None:
        return level.tokens_per_event
    if level.synthesised or not level.histograms[Metric.ITL].count:
        return None
    events = level.histograms[Metric.ITL].count + level.completed - level.empty
    return level.output_tokens / events if events else None


def _multi_token_note(level: LevelResult, per_event: float) -> str:
    """What a level whose events carried several tokens each measured: ITL per event or per token, the other
    one, and the step per event (speculative decoding's verified step)."""
    itl = level.percentile_ms(Metric.ITL, 50)
    tpot = level.mean_ms(Metric.TPOT)
    if level.itl_per_token:
        itl_text = (f"ITL is per token (each chunk's usage said its tokens){'' if itl is None else f', p50 {itl:.1f} ms'}"
                    f"; per event it is about {per_event:.2f}x that")  # fmt: skip
    else:
        itl_text = (f"ITL is per event{'' if itl is None else f' (p50 {itl:.1f} ms)'}; per token it is about "
                    f"{'' if itl is None else f'{itl / per_event:.1f} ms, '}the event's gap over its "
                    f"{per_event:.2f} tokens, and never more than the event's gap: ask for per-chunk usage where the "
                    "API has it (vLLM chat: stream_options.continuous_usage_stats)")  # fmt: skip
    step = (
        ""
        if tpot is None
        else f"; a step that verifies them takes about {tpot * per_event:.1f} ms (TPOT x tokens an event)"
    )
    acceptance = level.server.spec_acceptance if level.server is not None else None
    if acceptance is not None:
        step += f"; the server accepted {acceptance:.0%} of its draft tokens (its speculative-decoding counters)"
    return (f"{level.load.label}: {per_event:.2f} output tokens an event (speculative decoding, or a server that "
            f"sends several tokens a chunk): {itl_text}{step}")  # fmt: skip


def _speculation_note(levels: Sequence[LevelResult]) -> str:
    """A speculative-decoding server whose drafts were seldom accepted: its events still carry about one token
    each, and its counters say how often a draft paid off."""
    parts = []
    for lv in levels:
        assert lv.server is not None and lv.server.spec_acceptance is not None
        parts.append(f"{lv.load.label} {lv.server.spec_acceptance:.1%} of {lv.server.spec_draft_tokens:,.0f}")
    return (
        "the server ran speculative decoding and accepted few of its draft tokens ("
        + ", ".join(parts)
        + "): its events carry about one token each, so ITL is per token as with plain decoding, and each step "
        "also paid for verifying the drafts it threw away"
    )


def prefix_reuse(results: Results) -> str | None:
    """A replayed trace's prefix reuse: what its hash_ids imply beside what the server's counters read."""
    replayed = results.settings.trace or {}
    implied = replayed.get("implied_prefix_share")
    if implied is None:
        return None
    said = [f"{lv.load.label} {share:.1%}" for lv in results.levels
            if lv.server is not None and (share := lv.server.prefix_cache_hit_share) is not None]  # fmt: skip
    served = (
        f"the server's prefix-cache counters read {', '.join(said)}"
        if said
        else "the server exported no prefix-cache counters to compare (vLLM and SGLang do: --scrape-metrics on)"
    )
    return (f"trace prefix reuse: its hash_ids ({replayed['block_tokens']}-token blocks) imply {implied:.1%} of the "
            f"prompt tokens could be served from a prefix cache that forgets nothing; {served}")  # fmt: skip


def incomplete(results: Results) -> str | None:
    """An interrupted run: the levels shown are the ones that finished."""
    if results.complete:
        return None
    return "the run is incomplete: it was interrupted, the levels shown are the ones that finished"


LEVEL_RULES: Final[tuple[LevelRule, ...]] = (
    prompt_length, short_answers, estimated_tokens, late_timers, empty_answers, failed_requests,
)  # fmt: skip
RUN_RULES: Final[tuple[RunRule, ...]] = (images_unsaid, several_tokens_an_event, prefix_reuse, incomplete)


def measurement_caveats(results: Results) -> list[str]:
    """Every rule's sentence for this file, in the order: the run's setting, each level's, the run's own."""
    out = [note for note in (virtual_time(results),) if note is not None]
    out += [note for lv in results.levels for rule in LEVEL_RULES if (note := rule(results, lv)) is not None]
    out += [note for rule in RUN_RULES if (note := rule(results)) is not None]
    return out
