"""The live progress line says the level's current length and the measured window's token rate."""

from __future__ import annotations

from loadgen.cli.progress import _status
from loadgen.load import Load
from loadgen.run.metrics import LiveSnapshot
from loadgen.run.observe import LoadSnapshot

LIVE = LiveSnapshot(
    completed=110,
    failed=0,
    in_flight=1,
    output_tokens=5_000,
    ttft_p50_ms=50.0,
    ttft_p95_ms=60.0,
    tpot_p50_ms=20.0,
    tpot_p95_ms=25.0,
    window_output_tokens=2_490.0,
)


def test_a_level_lengthened_by_its_request_floor_shows_the_new_length() -> None:
    # issue 30 item 7: 'c=1 110/25s' while the floor had stretched the level past 25 s
    line = _status(LoadSnapshot(Load(kind="concurrency", value=1), 110.0, LIVE, planned_s=140.0, window_s=10.0), 25.0)
    assert "110/140s" in line


def test_the_token_rate_is_the_measured_windows_not_the_warm_ups() -> None:
    # issue 30 item 7: the live tok/s divided every token by the time since the level started (205 vs 249)
    line = _status(LoadSnapshot(Load(kind="concurrency", value=32), 30.0, LIVE, planned_s=30.0, window_s=10.0), 30.0)
    assert "~249 tok/s" in line
    warming = _status(LoadSnapshot(Load(kind="concurrency", value=32), 2.0, LIVE, planned_s=30.0, window_s=0.0), 30.0)
    assert "warm-up" in warming and "tok/s" not in warming
