"""Reading the server's per-request histograms (vLLM's queue and prefill times) from Prometheus text."""

from __future__ import annotations

from loadgen.run.promtext import Timed, read_gauges
from loadgen.run.scrape import _mean_ms

VLLM = """# TYPE vllm:request_queue_time_seconds histogram
vllm:num_requests_running{engine="0"} 3
vllm:num_requests_running{engine="1"} 2
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3"} 4
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf"} 5
vllm:request_queue_time_seconds_sum{engine="0"} 0.5
vllm:request_queue_time_seconds_count{engine="0"} 5
vllm:request_queue_time_seconds_sum{engine="1"} 0.25
vllm:request_queue_time_seconds_count{engine="1"} 5
vllm:request_prefill_time_seconds_sum{engine="0"} 2.0
"""


def test_a_histograms_sum_and_count_are_read_over_every_engine_and_a_half_one_is_absent() -> None:
    gauges = read_gauges(VLLM)
    assert gauges is not None and gauges.running == 5.0
    assert gauges.queue == Timed(0.75, 10.0)  # both engines; the buckets are not a sum
    assert gauges.prefill is None  # a sum without its count is no mean


def test_the_mean_over_the_window_is_the_change_in_sum_over_the_change_in_count() -> None:
    assert _mean_ms([Timed(1.0, 10), Timed(1.2, 12), Timed(1.5, 15)]) == 100.0  # 0.5 s over 5 requests
    assert _mean_ms([Timed(1.0, 10), Timed(1.0, 10)]) is None  # no request ended meanwhile
    assert _mean_ms([Timed(9.0, 90), Timed(0.5, 5)]) is None  # the server restarted: counters reset
    assert _mean_ms([None, Timed(0.5, 5)]) is None
    assert _mean_ms([Timed(0.5, 5)]) is None
