"""``planner.replay``: a measured run served again by the plan's engine, request for request."""

from __future__ import annotations

import numpy as np

from loadgen.sim.engine import EngineConfig
from planner.replay import MIN_REQUESTS, replay_check
from planner.replica_sim import simulate

LAW = EngineConfig(base_ms=20, per_seq_ms=0.5, max_num_seqs=16, prefill_ms_per_token=0.02)


def _served(n: int, law: EngineConfig) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(4)
    sent_s = 100.0 + np.cumsum(rng.exponential(0.1, n))  # a run's clock need not start at 0
    prompts, outputs = rng.integers(10, 500, n).astype(np.float64), rng.integers(1, 80, n)
    served = simulate(law, (sent_s - sent_s[0]) * 1000, outputs, prompts)
    shuffle = rng.permutation(n)  # records are written as requests finish, not as they were sent
    columns = (sent_s, prompts, outputs, served.ttft_ms, served.last_ms - served.arrival_ms)
    return tuple(c[shuffle] for c in columns)


def test_a_run_the_law_itself_served_replays_exactly_and_a_slower_server_is_named_optimistic() -> None:
    sent, prompts, outputs, ttft, e2e = _served(400, LAW)
    same = replay_check(LAW, "r=10/s", sent, prompts, outputs, ttft, e2e)
    assert same.verdict == "agrees" and all(row.ratio == 1.0 for row in same.rows)
    assert same.rate_rps == 399 / (sent.max() - sent.min())
    slower = _served(400, EngineConfig(base_ms=30, per_seq_ms=0.5, max_num_seqs=16, prefill_ms_per_token=0.02))
    check = replay_check(LAW, "r=10/s", *slower)
    assert check.verdict == "optimistic" and "not the conservative side" in check.note


def test_a_handful_of_requests_is_not_judged() -> None:
    check = replay_check(LAW, "r=10/s", *_served(MIN_REQUESTS - 1, LAW))
    assert check.verdict == "too few requests" and not check.rows
