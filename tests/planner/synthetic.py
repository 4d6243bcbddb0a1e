"""Results files built from stated per-level distributions (a known truth, no sockets)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from loadgen.histogram import LatencyHistogram
from loadgen.level.result import LevelResult
from loadgen.level.server_sample import ServerSample
from loadgen.load import Load
from loadgen.quantity import Metric
from loadgen.results import Results, RunInfo, Target
from loadgen.run_settings import RunSettings


def closed_level(
    concurrency: int, tpot_ms: np.ndarray, *, output_tokens: int = 32, window_s: float = 30.0, waiting: float = 0.0
) -> LevelResult:
    """A closed-loop level whose requests had these TPOTs; the server ran ``concurrency`` sequences."""
    n = len(tpot_ms)
    e2e_ms = tpot_ms * output_tokens
    hists = {m: LatencyHistogram() for m in Metric}
    hists[Metric.TPOT].record_many_us(np.rint(tpot_ms * 1000).astype(np.int64))
    hists[Metric.ITL].record_many_us(np.rint(tpot_ms * 1000).astype(np.int64))
    hists[Metric.TTFT].record_many_us(np.rint(tpot_ms * 1000).astype(np.int64))
    hists[Metric.TTFT_SENT].record_many_us(np.rint(tpot_ms * 1000).astype(np.int64))
    hists[Metric.E2E].record_many_us(np.rint(e2e_ms * 1000).astype(np.int64))
    hists[Metric.LAG].record_many_us(np.full(n, 100, dtype=np.int64))
    rate = concurrency / (float(np.mean(e2e_ms)) / 1000.0)
    completed = max(1, round(rate * window_s))
    return LevelResult(
        load=Load(kind="concurrency", value=concurrency),
        window_s=window_s,
        completed=completed,
        errors={},
        output_tokens=completed * output_tokens,
        window_output_tokens=float(completed * output_tokens),
        prompt_tokens=completed * 64,
        prompt_tokens_reported=completed,
        tokens_estimated=False,
        achieved_concurrency=float(concurrency),
        histograms=hists,
        server=ServerSample(source="loadgen_sim", samples=100, running_mean=float(concurrency), waiting_mean=waiting),
    )


def sweep_results(levels: tuple[LevelResult, ...], settings: dict[str, object] | None = None) -> Results:
    return Results(
        run=RunInfo(
            id="synthetic",
            started_at="2026-11-30T00:00:00Z",
            tool_version="0.1.0",
            python="3.11.7",
            platform="Linux",
            cpu_count=2,
            command="sweep",
        ),
        target=Target("http://127.0.0.1:8000/v1/", "sim", "chat"),
        settings=RunSettings.from_json(settings or {"api": "chat"}),
        levels=levels,
        complete=True,
    )


def law_tpots(base: float, slope: float, concurrency: int, n: int, *, cv: float, seed: int) -> np.ndarray:
    """TPOTs around the law's step at this batch, with a small spread."""
    rng = np.random.default_rng(seed)
    return (base + slope * concurrency) * rng.lognormal(0.0, cv, n)


def law_sweep(
    base: float,
    slope: float,
    cap: int,
    levels: tuple[int, ...],
    *,
    output_tokens: int = 32,
    n: int = 300,
    window_s: float = 30.0,
    front_end_ms: float = 0.0,
) -> tuple[LevelResult, ...]:
    """A closed-loop sweep of an ideal continuous-batching server: ``cap`` slots, the rest queue;
    ``front_end_ms``: what every request's TTFT (and E2E) holds beyond the engine."""
    out = []
    for c in levels:
        batch = min(c, cap)
        step = base + slope * batch
        tpots = law_tpots(base, slope, batch, n, cv=0.01, seed=c)
        decode_ms = step * output_tokens
        rate = batch / (decode_ms / 1000.0)  # completions/s: the batch turns over once per decode
        queue_ms = max(0.0, c / rate * 1000.0 - decode_ms)  # Little's law: the rest wait
        level = closed_level(c, tpots, output_tokens=output_tokens, window_s=window_s, waiting=float(c - batch))
        ttft = level.histograms[Metric.TTFT]
        ttft.__init__()  # type: ignore[misc]
        ttft.record_many_us(np.rint((tpots + queue_ms + front_end_ms) * 1000).astype(np.int64))
        e2e = level.histograms[Metric.E2E]
        e2e.__init__()  # type: ignore[misc]
        e2e.record_many_us(np.rint((tpots * output_tokens + queue_ms + front_end_ms) * 1000).astype(np.int64))
        completed = max(1, round(rate * window_s))
        out.append(
            replace(
                level,
                completed=completed,
                output_tokens=completed * output_tokens,
                window_output_tokens=float(completed * output_tokens),
                server=ServerSample(
                    source="loadgen_sim", samples=100, running_mean=float(batch), waiting_mean=float(c - batch)
                ),
            )
        )
    return tuple(out)
