"""Reading the server's per-request histograms (vLLM's queue and prefill times) from Prometheus text."""

from __future__ import annotations

from loadgen.run.promtext import Timed, kv_cache_tokens, read_gauges
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


SGLANG = """# TYPE sglang:cached_tokens_total counter
sglang:num_running_reqs{model_name="m",tp_rank="0"} 4
sglang:num_queue_reqs{model_name="m",tp_rank="0"} 1
sglang:prompt_tokens_total{model_name="m"} 4096
sglang:generation_tokens_total{model_name="m"} 512
sglang:cached_tokens_total{model_name="m",cache_source="device"} 3000
sglang:cached_tokens_total{model_name="m",cache_source="host"} 168
sglang:cache_hit_rate{model_name="m"} 0.0
"""


def test_sglangs_cached_tokens_over_every_source_are_its_prefix_cache_hits_of_the_prompt_tokens() -> None:
    gauges = read_gauges(SGLANG)
    assert gauges is not None and gauges.source == "sglang"
    assert gauges.cache_queries == 4096.0  # every prompt token was looked up in the radix cache
    assert gauges.cache_hits == 3168.0  # device and host; the latest batch's rate gauge is not what is read


def test_an_sglang_without_the_cached_tokens_counter_reports_no_hits_rather_than_none_found() -> None:
    older = "\n".join(line for line in SGLANG.splitlines() if "cached_tokens" not in line)
    gauges = read_gauges(older)
    assert gauges is not None and gauges.cache_queries == 4096.0
    assert gauges.cache_hits is None


VLLM_CACHE_CONFIG = (
    'vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",'
    'gpu_memory_utilization="0.92",kv_cache_size_tokens="524288",num_cpu_blocks="None",num_gpu_blocks="4096",'
    'sliding_window="None"} 1.0\n'
    'vllm:num_requests_running{engine="0",model_name="tiny"} 3.0\n'
)


def test_the_kv_cache_size_is_read_from_vllms_cache_config_labels() -> None:
    """vLLM 0.32's CPU build, as scraped: the size in tokens, else blocks x block size, summed over engines."""
    gauges = read_gauges(VLLM_CACHE_CONFIG)
    assert gauges is not None and gauges.kv_capacity_tokens == 524_288
    older = VLLM_CACHE_CONFIG.replace('kv_cache_size_tokens="524288",', "")
    assert kv_cache_tokens(older, "vllm:cache_config_info") == 4096 * 128
    two = VLLM_CACHE_CONFIG + VLLM_CACHE_CONFIG.splitlines()[0].replace('engine="0"', 'engine="1"') + "\n"
    assert kv_cache_tokens(two, "vllm:cache_config_info") == 2 * 524_288
    unknown = 'vllm:cache_config_info{block_size="None",num_gpu_blocks="None"} 1.0\nvllm:num_requests_running 1\n'
    gauges = read_gauges(unknown)
    assert gauges is not None and gauges.kv_capacity_tokens is None
