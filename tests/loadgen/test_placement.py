"""Worker placement (issue 71): one free core each where the machine has them, else none pinned and said."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.run.placement import core_times, idle_shares, placement


def test_workers_go_to_the_most_idle_free_cores_one_each() -> None:
    chosen = placement(2, [0, 1, 2, 3], {0: 0.1, 1: 0.9, 2: 0.6, 3: 0.95})
    assert chosen.cores == (1, 3) and chosen.said == "pinned: worker 0 on core 1, worker 1 on core 3"


def test_too_few_free_cores_pins_nothing_and_says_more_workers_cannot_help() -> None:
    chosen = placement(2, [0, 1], {0: 0.2, 1: 0.97})  # the server busy on core 0
    assert chosen.cores is None
    assert chosen.said.startswith("not pinned: 1 of the 2 cores this process may use were free")
    assert chosen.said.endswith("for 2 workers; more workers cannot help on this machine")


def test_idle_shares_come_from_two_readings_of_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0 0 0\nintr 1 2\n")
    before = core_times(stat)
    stat.write_text("cpu  0\ncpu0 95 0 5 50 0 0 0 0 0 0\ncpu1 5 0 5 130 10 0 0 0 0 0\n")
    after = core_times(stat)
    assert before == {0: (40, 50), 1: (40, 50)}
    assert after is not None and idle_shares(before, after) == pytest.approx({0: 0.1, 1: 1.0})
    assert core_times(tmp_path / "absent") is None
