"""Reading server gauges and token counters from Prometheus text: the names of vLLM, SGLang, TGI and our
simulator (pure)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True, kw_only=True)
class GaugeNames:
    source: str
    running: str
    waiting: str
    kv_usage: tuple[str, ...] = ()
    prompt_tokens: str = ""  # counter of prompt tokens processed ("": the server has none)
    generation_tokens: str = ""  # counter of tokens generated
    # per-request histograms (their ``_sum`` in seconds and ``_count``): the wait for a batch slot, and from
    # admission to the first token; what TTFT holds beyond them is the API front end and the network
    queue_time: str = ""
    prefill_time: str = ""
    # counters of prompt tokens looked up in the prefix cache and found there: a level whose prompts the cache
    # served measured a cheaper prefill than a new prompt costs
    cache_queries: str = ""
    cache_hits: str = ""
    # an info gauge whose labels give the KV cache's size: vLLM's ``cache_config_info`` (``kv_cache_size_tokens``,
    # or ``num_gpu_blocks`` x ``block_size`` in releases without it)
    cache_config: str = ""
    # speculative decoding's counters: draft tokens proposed and accepted (their ratio: the acceptance rate)
    spec_draft: str = ""
    spec_accepted: str = ""


KNOWN: Final = (
    GaugeNames(
        source="vllm",
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prompt_tokens="vllm:prompt_tokens_total",
        generation_tokens="vllm:generation_tokens_total",
        queue_time="vllm:request_queue_time_seconds",
        prefill_time="vllm:request_prefill_time_seconds",
        cache_queries="vllm:prefix_cache_queries_total",
        cache_hits="vllm:prefix_cache_hits_total",
        cache_config="vllm:cache_config_info",
        spec_draft="vllm:spec_decode_num_draft_tokens_total",
        spec_accepted="vllm:spec_decode_num_accepted_tokens_total",
    ),
    GaugeNames(
        source="sglang",
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        kv_usage=("sglang:token_usage",),
        prompt_tokens="sglang:prompt_tokens_total",
        generation_tokens="sglang:generation_tokens_total",
        # every prompt token is looked up in the radix cache; the hits are counted per source (device, host,
        # storage), summed here. Its ``cache_hit_rate`` gauge is not read: it is the latest batch's, not the
        # window's
        cache_queries="sglang:prompt_tokens_total",
        cache_hits="sglang:cached_tokens_total",
    ),
    GaugeNames(source="tgi", running="tgi_batch_current_size", waiting="tgi_queue_size"),
    GaugeNames(
        source="loadgen_sim",
        running="loadgen_sim:num_requests_running",
        waiting="loadgen_sim:num_requests_waiting",
        kv_usage=(),
        prompt_tokens="loadgen_sim:prompt_tokens_total",
        generation_tokens="loadgen_sim:generation_tokens_total",
        queue_time="loadgen_sim:request_queue_time_seconds",
        prefill_time="loadgen_sim:request_prefill_time_seconds",
        cache_queries="loadgen_sim:prefix_cache_queries_total",
        cache_hits="loadgen_sim:prefix_cache_hits_total",
        cache_config="loadgen_sim:cache_config_info",
        spec_draft="loadgen_sim:spec_decode_num_draft_tokens_total",
        spec_accepted="loadgen_sim:spec_decode_num_accepted_tokens_total",
    ),
)


@dataclass(frozen=True, slots=True)
class Timed:
    """A per-request histogram's running totals: seconds summed over ``count`` requests."""

    seconds: float
    count: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Gauges:
    """One scrape: the batch gauges, and the token counters where the server has them."""

    source: str
    running: float
    waiting: float
    kv_usage: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    queue: Timed | None = None
    prefill: Timed | None = None
    cache_queries: float | None = None
    cache_hits: float | None = None
    kv_capacity_tokens: float | None = None  # the KV cache's size in tokens, where the server says it
    spec_draft: float | None = None  # speculative decoding: draft tokens proposed, and accepted, so far
    spec_accepted: float | None = None


def _timed(samples: dict[str, float], name: str) -> Timed | None:
    total, count = samples.get(f"{name}_sum"), samples.get(f"{name}_count")
    return Timed(total, count) if name and total is not None and count is not None else None


def parse_samples(text: str) -> dict[str, float]:
    """Sum each metric's samples over its label sets (e.g. several engines behind one endpoint)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        if "{" in line:
            if "}" not in line:  # a label set that never closes: not a sample
                continue
            name, fields = line[: line.index("{")], line[line.rindex("}") + 1 :].split()
        else:
            name, *fields = line.split()
        value_str = fields[0] if fields else ""
        try:
            value = float(value_str)
        except ValueError:
            continue
        if not math.isfinite(value):  # NaN or +Inf says nothing about a batch, and is not JSON
            continue
        totals[name] = totals.get(name, 0.0) + value
    return totals


def read_gauges(text: str) -> Gauges | None:
    """The gauges and counters of the first known naming scheme present, else None."""
    samples = parse_samples(text)
    for names in KNOWN:
        if names.running in samples:
            return Gauges(
                source=names.source,
                running=samples[names.running],
                waiting=samples.get(names.waiting, 0.0),
                kv_usage=next((samples[k] for k in names.kv_usage if k in samples), None),
                prompt_tokens=samples.get(names.prompt_tokens) if names.prompt_tokens else None,
                generation_tokens=samples.get(names.generation_tokens) if names.generation_tokens else None,
                queue=_timed(samples, names.queue_time),
                prefill=_timed(samples, names.prefill_time),
                cache_queries=samples.get(names.cache_queries) if names.cache_queries else None,
                cache_hits=samples.get(names.cache_hits) if names.cache_hits else None,
                kv_capacity_tokens=kv_cache_tokens(text, names.cache_config) if names.cache_config else None,
                spec_draft=samples.get(names.spec_draft) if names.spec_draft else None,
                spec_accepted=samples.get(names.spec_accepted) if names.spec_accepted else None,
            )
    return None


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def kv_cache_tokens(text: str, info: str) -> float | None:
    """The KV cache's size in tokens from the labels of the info gauge ``info``, summed over its engines (one
    line each behind a data-parallel endpoint); None where no line gives it."""
    total, found = 0.0, False
    # str.find rather than a pass over every line: the scraper reads a page of tens of KB every 0.2 s
    page, prefix = "\n" + text, "\n" + info + "{"
    at = page.find(prefix)
    while at >= 0:
        start = at + len(prefix)
        end = page.find("\n", start)
        line = page[start:] if end < 0 else page[start:end]
        at = page.find(prefix, start)
        if "}" not in line:
            continue
        labels = dict(_LABEL.findall(line[: line.rindex("}")]))
        tokens = _number(labels.get("kv_cache_size_tokens"))
        if tokens is None:
            blocks, size = _number(labels.get("num_gpu_blocks")), _number(labels.get("block_size"))
            tokens = blocks * size if blocks is not None and size is not None else None
        if tokens is not None:
            total, found = total + tokens, True
    return total if found else None


def _number(text: str | None) -> float | None:
    """A label's value as a positive finite number (vLLM writes "None" for one it does not know)."""
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None
