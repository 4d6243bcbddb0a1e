"""Arrival plans: sorted, seeded, exact when constant; means checked once with a fixed seed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.choices import Arrival
from loadgen.load import arrival_offsets, offsets_within


@given(
    rate=st.floats(0.1, 1000),
    n=st.integers(0, 300),
    arrival=st.sampled_from(["constant", "poisson", "gamma"]),
    burstiness=st.floats(0.1, 10),
    seed=st.integers(0, 2**32 - 1),
)
def test_offsets_sorted_nonnegative_and_reproducible(
    rate: float, n: int, arrival: str, burstiness: float, seed: int
) -> None:
    a = arrival_offsets(rate, n, arrival=arrival, burstiness=burstiness, rng=np.random.default_rng(seed))  # type: ignore[arg-type]
    b = arrival_offsets(rate, n, arrival=arrival, burstiness=burstiness, rng=np.random.default_rng(seed))  # type: ignore[arg-type]
    assert len(a) == n
    assert np.all(np.diff(a) >= 0) and np.all(a >= 0)
    assert np.array_equal(a, b)


def test_constant_arrivals_are_exact() -> None:
    assert arrival_offsets(4.0, 5, arrival=Arrival.CONSTANT, rng=np.random.default_rng(0)).tolist() == [
        0,
        0.25,
        0.5,
        0.75,
        1.0,
    ]


@pytest.mark.parametrize(
    ("arrival", "burstiness", "cv"), [("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)]
)
def test_mean_rate_and_burstiness(arrival: str, burstiness: float, cv: float) -> None:
    gaps = np.diff(arrival_offsets(10.0, 20000, arrival=arrival, burstiness=burstiness, rng=np.random.default_rng(1)))  # type: ignore[arg-type]
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_offsets_within_a_duration() -> None:
    offsets = offsets_within(50.0, 10.0, rng=np.random.default_rng(3))
    assert offsets.max() < 10.0
    assert len(offsets) == pytest.approx(500, rel=0.15)


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"rate": 0.0}, "rate"), ({"rate": 1.0, "arrival": "gamma", "burstiness": 0.0}, "burstiness")]
)
def test_bad_parameters(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        arrival_offsets(n=3, rng=np.random.default_rng(0), **kwargs)


@pytest.mark.parametrize("event_loop_name", ["asyncio", "uvloop"])
def test_a_send_never_wakes_before_its_due_time(event_loop_name: str) -> None:
    # issue 30 item 6: libuv's timers (uvloop) count whole milliseconds and fired up to 0.8 ms early; an
    # open-loop send then had a negative lag, which the lag histogram dropped as out of range
    import asyncio
    import random
    import time

    from loadgen.run.runner import _sleep_until
    from loadgen.wire.loops import loop_factory

    if event_loop_name == "uvloop":
        pytest.importorskip("uvloop")
    rng = random.Random(3)
    early: list[float] = []

    async def sends() -> None:
        for _ in range(100):
            due = time.monotonic() + rng.uniform(0.0001, 0.003)
            await _sleep_until(due, time.monotonic)
            early.append(due - time.monotonic())

    with asyncio.Runner(loop_factory=loop_factory(event_loop_name)) as runner:  # type: ignore[arg-type]
        runner.run(sends())
    assert max(early) <= 0, f"woke {max(early) * 1e6:.0f} us early"
