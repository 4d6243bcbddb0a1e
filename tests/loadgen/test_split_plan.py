"""A level split across workers (processes or Ray actors) is the level one process would run."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.choices import Arrival
from loadgen.load import LevelPlan, Load, open_loop_offsets, split_plan


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.5, 200.0),
    workers=st.integers(1, 9),
    seed=st.integers(0, 10_000),
    arrival=st.sampled_from(["poisson", "gamma", "constant"]),
    budget=st.one_of(st.none(), st.integers(1, 500)),
)
def test_the_union_of_open_loop_shares_is_the_one_process_schedule(
    rate: float, workers: int, seed: int, arrival: str, budget: int | None
) -> None:
    plan = LevelPlan(
        load=Load(kind="rate", value=rate, arrival=Arrival(arrival), burstiness=0.5 if arrival == "gamma" else None),
        duration_s=5.0,
        requests=budget,
        warmup_s=1.0,
        seed=seed,
    )
    whole = open_loop_offsets(plan)
    shares = split_plan(plan, workers)
    union = np.sort(np.concatenate([open_loop_offsets(p) for p in shares])) if shares else np.array([])
    assert np.array_equal(union, whole)
    assert len({p.seed for p in shares}) == len(shares)  # distinct prompts per worker
    if budget is not None:
        assert sum(p.requests or 0 for p in shares) == len(whole)


def test_closed_loop_shares_divide_clients_and_budget() -> None:
    shares = split_plan(LevelPlan(load=Load(kind="concurrency", value=5), duration_s=None, requests=11), 3)
    assert [p.load.value for p in shares] == [2, 2, 1] and [p.requests for p in shares] == [4, 4, 3]
    assert all(p.arrivals_s is None for p in shares)
    assert len(split_plan(LevelPlan(load=Load(kind="concurrency", value=2), duration_s=5.0), 4)) == 2  # no empty worker
