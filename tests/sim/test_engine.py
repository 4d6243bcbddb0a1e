"""The sans-IO engine in virtual time: no sockets, no sleeping."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.choices import Mode
from loadgen.engine import Engine, EngineConfig, Step


def run_to_idle(engine: Engine, now_ms: float = 0.0) -> list[Step]:
    """Drive the engine back to back until it has nothing to run."""
    steps = []
    while (step := engine.next_step(now_ms)) is not None:
        steps.append(step)
        now_ms = step.end_ms
    return steps


def token_times(steps: list[Step], seq_id: int) -> list[float]:
    return [s.end_ms for s in steps if seq_id in s.emitted]


def test_lone_request_follows_the_batch_1_law() -> None:
    engine = Engine(config=EngineConfig())
    engine.submit(0, prompt_tokens=10, max_tokens=20, now_ms=0.0)
    steps = run_to_idle(engine)
    times = token_times(steps, 0)
    assert len(times) == 20
    assert times[0] == pytest.approx(25.4)  # admitted in step 1, first token at its end
    assert np.diff(times) == pytest.approx([25.4] * 19)
    assert engine.counters.tokens == 20 and engine.num_running == 0


def test_sixteen_streams_step_at_31_4_ms() -> None:
    engine = Engine(config=EngineConfig())
    for i in range(16):
        engine.submit(i, prompt_tokens=1, max_tokens=10, now_ms=0.0)
    steps = run_to_idle(engine)
    assert [s.running for s in steps] == [16] * 10
    assert all(s.duration_ms == pytest.approx(31.4) for s in steps)


def test_max_num_seqs_queues_the_rest_fifo() -> None:
    engine = Engine(config=EngineConfig(max_num_seqs=4))
    for i in range(8):
        engine.submit(i, prompt_tokens=1, max_tokens=5, now_ms=0.0)
    first = engine.next_step(0.0)
    assert first is not None
    assert first.admitted == (0, 1, 2, 3)
    assert engine.num_running == 4 and engine.num_waiting == 4
    assert first.duration_ms == pytest.approx(25 + 0.4 * 4)
    steps = [first, *run_to_idle(engine, first.end_ms)]
    assert steps[5].admitted == (4, 5, 6, 7)  # refilled the step after the first four finished
    assert len(steps) == 10


def test_prefill_cost_is_charged_in_the_admitting_step() -> None:
    engine = Engine(config=EngineConfig(prefill_ms_per_token=0.01))
    engine.submit(0, prompt_tokens=1000, max_tokens=3, now_ms=0.0)
    steps = run_to_idle(engine)
    assert [s.duration_ms for s in steps] == pytest.approx([25.4 + 10.0, 25.4, 25.4])


def test_static_batch_3_3_3_10_uses_40_slot_steps_for_19_tokens() -> None:
    engine = Engine(config=EngineConfig(mode=Mode.STATIC, static_batch=4))
    for i, n in enumerate([3, 3, 3, 10]):
        engine.submit(i, prompt_tokens=1, max_tokens=n, now_ms=0.0)
    steps = run_to_idle(engine)
    c = engine.counters
    assert (len(steps), c.slot_steps, c.tokens) == (10, 40, 19)
    assert c.tokens / c.slot_steps == 0.475
    assert all(s.running == 4 for s in steps)  # finished members keep (and pay for) their slot


def test_continuous_finishes_the_same_work_in_fewer_steps_than_static() -> None:
    lengths = [3, 3, 3, 10] * 2

    def steps_for(mode: str) -> tuple[int, int, int]:
        engine = Engine(config=EngineConfig(mode=mode, max_num_seqs=4, static_batch=4))  # type: ignore[arg-type]
        for i, n in enumerate(lengths):
            engine.submit(i, prompt_tokens=1, max_tokens=n, now_ms=0.0)
        steps = run_to_idle(engine)
        return len(steps), engine.counters.tokens, engine.counters.slot_steps

    static_steps, static_tokens, static_slots = steps_for("static")
    cont_steps, cont_tokens, cont_slots = steps_for("continuous")
    assert static_tokens == cont_tokens == sum(lengths)
    assert static_steps == 20
    assert cont_steps < static_steps
    assert cont_slots == cont_tokens  # no padding: every occupied slot-step does useful work
    assert static_slots > static_tokens


def test_static_mode_waits_for_a_full_batch_or_the_timeout() -> None:
    engine = Engine(config=EngineConfig(mode=Mode.STATIC, static_batch=4, static_wait_ms=50.0))
    engine.submit(0, prompt_tokens=1, max_tokens=2, now_ms=0.0)
    assert engine.next_step(10.0) is None
    assert engine.wake_at_ms() == 50.0
    step = engine.next_step(50.0)
    assert step is not None and step.admitted == (0,)


def test_cancel_frees_the_slot() -> None:
    engine = Engine(config=EngineConfig(max_num_seqs=1))
    engine.submit(0, prompt_tokens=1, max_tokens=100, now_ms=0.0)
    engine.submit(1, prompt_tokens=1, max_tokens=1, now_ms=0.0)
    engine.next_step(0.0)
    assert engine.cancel(0)
    step = engine.next_step(30.0)
    assert step is not None and step.admitted == (1,)
    assert not engine.cancel(42)


def test_noise_is_seeded_with_mean_one_and_the_requested_cv() -> None:
    def durations(seed: int) -> np.ndarray:
        engine = Engine(config=EngineConfig(noise_cv=0.2, seed=seed, base_ms=10.0, per_seq_ms=0.0))
        engine.submit(0, prompt_tokens=1, max_tokens=4000, now_ms=0.0)
        return np.array([s.duration_ms for s in run_to_idle(engine)])

    d = durations(7)
    assert np.array_equal(d, durations(7))
    assert d.mean() == pytest.approx(10.0, rel=0.02)
    assert d.std() / d.mean() == pytest.approx(0.2, rel=0.1)
    assert not math.isclose(d[0], durations(8)[0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"base_ms": -1.0}, "base_ms"),
        ({"mode": "turbo"}, "mode"),
        ({"base_ms": 0.0, "per_seq_ms": 0.0}, "must take time"),
        ({"per_kv_ms": -0.1}, "per_kv_ms"),
        ({"max_num_seqs": 64, "max_num_batched_tokens": 32}, "decode token for each"),
        ({"kv_capacity_tokens": 0}, "kv_capacity_tokens"),
    ],
)
def test_bad_config_is_rejected(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EngineConfig(**kwargs)  # type: ignore[arg-type]


def test_a_step_pays_for_the_kv_cache_it_reads() -> None:
    # one sequence, prompt 1000: step k reads 1000 + (k - 1) tokens (its prompt, then its tokens so far)
    engine = Engine(config=EngineConfig(per_kv_ms=2.0))
    engine.submit(0, prompt_tokens=1000, max_tokens=3, now_ms=0.0)
    steps = run_to_idle(engine)
    assert [s.duration_ms for s in steps] == pytest.approx([25.4 + 2.0, 25.4 + 2.002, 25.4 + 2.004])


def test_chunked_prefill_spreads_a_long_prompt_over_steps_within_the_token_budget() -> None:
    # budget 256 a step: a running decode takes 1, so the 1,000-token prompt goes in as 255 + 255 + 255 + 235
    config = EngineConfig(prefill_ms_per_token=0.01, max_num_seqs=4, max_num_batched_tokens=256)
    engine = Engine(config=config)
    engine.submit(0, prompt_tokens=1, max_tokens=10, now_ms=0.0)
    first = engine.next_step(0.0)
    assert first is not None and first.emitted == (0,)
    engine.submit(1, prompt_tokens=1000, max_tokens=2, now_ms=0.0)
    steps = [first, *run_to_idle(engine, first.end_ms)]
    long_prompt = token_times(steps, 1)
    assert len(long_prompt) == 2
    assert long_prompt[0] == steps[4].end_ms  # its first token ends its fourth step of prefill
    assert [s.duration_ms for s in steps[1:5]] == pytest.approx(
        [25 + 0.4 + 2.55, 25 + 0.4 + 2.55, 25 + 0.4 + 2.55, 25 + 0.8 + 2.35]  # the last chunk's step decodes both
    )


def test_a_request_waits_for_kv_space() -> None:
    # 3,000 tokens of cache, each request reserves 1,000 + 100: two run, the third waits for one to finish
    engine = Engine(config=EngineConfig(kv_capacity_tokens=3000))
    for i in range(3):
        engine.submit(i, prompt_tokens=1000, max_tokens=100, now_ms=0.0)
    first = engine.next_step(0.0)
    assert first is not None and first.admitted == (0, 1) and engine.num_waiting == 1
    steps = [first, *run_to_idle(engine, first.end_ms)]
    assert steps[100].admitted == (2,)


@pytest.mark.parametrize(("b", "prompt", "output"), [(8, 512, 64), (32, 128, 256)])
def test_steady_state_step_is_the_design_formula(b: int, prompt: int, output: int) -> None:
    # docs/design.md: mean step(b) ~ base + b * (per_seq + per_kv * (P + O/2) / 1000 + prefill * P / O), no budget;
    # a closed loop of b clients, each sending again when its request ends (staggered: one a step at first)
    config = EngineConfig(per_kv_ms=0.5, prefill_ms_per_token=0.002, max_num_seqs=b)
    engine = Engine(config=config)
    now, next_id, durations = 0.0, 0, []
    for _ in range(b):
        engine.submit(next_id, prompt_tokens=prompt, max_tokens=output, now_ms=now)
        next_id += 1
        step = engine.next_step(now)
        assert step is not None
        now = step.end_ms
    for _ in range(20 * output):
        step = engine.next_step(now)
        assert step is not None
        durations.append(step.duration_ms)
        for _ in step.finished:
            engine.submit(next_id, prompt_tokens=prompt, max_tokens=output, now_ms=step.end_ms)
            next_id += 1
        now = step.end_ms
    expected = 25 + b * (0.4 + 0.5 * (prompt + output / 2) / 1000 + 0.002 * prompt / output)
    assert float(np.mean(durations[5 * output :])) == pytest.approx(expected, rel=0.01)
