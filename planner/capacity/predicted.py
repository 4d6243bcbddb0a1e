"""A sweep not run, and what a calibration holds beyond its fitted engine (pure).

The length model answers for a mean step. What a closed loop at concurrency c sees for TTFT depends
on how each prompt joins a running batch, which the simulator's engine reproduces step by step with
the fitted terms (``planner.simulation.closed_loop``). So ``plan --predict-levels`` runs that engine closed-loop
at each concurrency, and adds to TTFT what the calibration measured beyond the same engine at that
many clients (``planner.laws.ttft_residual``: the front end, the hop into the engine, the spread of real
steps), found by running the engine at every calibration level too. The engine has no step noise, so
TPOT p95 comes from the length model fitted on TPOT p95 at that batch, and TTFT p95 from the residual
of TTFT p95.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from loadgen.engine import EngineConfig
from loadgen.quantity import Metric
from loadgen.results import Results
from planner.capacity.mix_forecast import MixForecast, PredictedLevel, PredictedSweep
from planner.laws.lengthmodel import LengthModel, Mix, Prediction, calibrated_levels
from planner.laws.lengthsample import LengthSample, shape_of
from planner.laws.ttft_residual import STATISTICS, ResidualRow, TtftResidual, fit_ttft_residual
from planner.simulation.closed_loop import run_closed_loop


def predict_levels(
    forecast: MixForecast,
    engine: EngineConfig,
    lengths: LengthSample,
    levels: Sequence[int],
    tpot_p95: LengthModel | None,
) -> PredictedSweep:
    """Each closed-loop level served by ``engine`` (the forecast's fitted engine with the server's limits) with
    requests drawn from ``lengths`` (at the forecast's mix), TTFT plus what the calibration measured beyond
    the engine at that many clients (without a residual, the fitted overhead), each with its 95% interval:
    the same run with the engine at either end of the forecast's interval, and the residual at either end
    of its own. TPOT p95 is read at the batch the level runs (its concurrency, capped at the server's)."""
    mix, residual = forecast.mix, forecast.ttft_residual
    overhead = forecast.model.ttft_overhead_ms or 0.0
    ends = [
        e.serving(engine.max_num_seqs, engine.max_num_batched_tokens, engine.kv_capacity_tokens)
        for e in forecast.engine_range or ()
    ]
    predicted = []
    for c in levels:
        runs = [run_closed_loop(e, c, lengths) for e in (engine, *ends)]
        ttft: dict[float | None, tuple[float, float, float]] = {}
        for q in STATISTICS:
            term = residual.term(q) if residual is not None else None
            added = term.added_ms(c) if term is not None else overhead
            low, high = term.added_range_ms(c) if term is not None else (overhead, overhead)
            simulated = [run.ttft_ms_at(q) for run in runs]
            point = simulated[0] + added
            ttft[q] = (point, min(min(simulated) + low, point), max(max(simulated) + high, point))
        batch = min(c, engine.max_num_seqs)
        p95 = tpot_p95.tpot_range(batch, mix) if tpot_p95 is not None else None
        band = forecast.model.tpot_range(batch, mix)
        tpot = {q: _tpot_with_range([run.tpot_ms_at(q) for run in runs], band) for q in (50.0, None)}
        predicted.append(
            PredictedLevel(
                concurrency=c,
                ttft_p50_ms=ttft[50.0][0],
                ttft_p95_ms=ttft[95.0][0],
                tpot_p50_ms=tpot[50.0][0],
                tpot_p95_ms=None if p95 is None else p95.value_ms,
                ttft_mean_ms=ttft[None][0],
                tpot_mean_ms=tpot[None][0],
                ttft_p50_range_ms=ttft[50.0][1:],
                ttft_p95_range_ms=ttft[95.0][1:],
                ttft_mean_range_ms=ttft[None][1:],
                tpot_p50_range_ms=tpot[50.0][1],
                tpot_p95_range_ms=None if p95 is None else (p95.low_ms, p95.high_ms),
                tpot_mean_range_ms=tpot[None][1],
            )
        )
    return PredictedSweep(tuple(predicted), lengths.source)


def _tpot_with_range(
    simulated: Sequence[float | None], band: Prediction | None
) -> tuple[float | None, tuple[float, float] | None]:
    """A TPOT statistic of the fitted engine's run (the first of ``simulated``) and its 95% interval: the runs of
    the engine at either end of its own, and the law's interval at the mix (held-out error included) as a share
    of its point, whichever is wider (None: every answer was one token)."""
    point = simulated[0]
    if point is None:
        return None, None
    ends = [v for v in simulated if v is not None]
    low, high = (
        (band.low_ms / band.value_ms, band.high_ms / band.value_ms) if band and band.value_ms > 0 else (1.0, 1.0)
    )
    return point, (min(*ends, point * low), max(*ends, point * high))


def alone_prefill_ms(engine: EngineConfig, prompt_tokens: float, budget: int | None) -> float:
    """How long ``engine`` takes to a prompt's first token with nothing else running: what TTFT's growth
    with the load beyond the engine is read in proportion to (``TtftResidual.at_prompt``)."""
    served = engine.serving(1, closed_loop_budget(budget, 1, prompt_tokens), None)
    return run_closed_loop(served, 1, LengthSample.fixed(prompt_tokens, 2), per_client=1).ttft_ms_at(None)


def closed_loop_budget(budget: int | None, max_num_seqs: int, prompt_tokens: float) -> int:
    """The token budget per step a simulated closed loop runs: the server's where known, else one prompt beside
    the decodes. Without a budget the simulator prefills every waiting prompt in one step, and a closed loop
    of fixed lengths then locks into cohorts that prefill and finish together, which a real engine (chunked
    prefill, and the jitter of real steps) does not: NIM 8B's 5000/500 at 100 clients was predicted TTFT
    4.4 s where it measured 0.9, and TPOT 22 ms for 29.7 (a batch starved by the queue); one prompt a step
    read TPOT 29.4."""
    return budget if budget is not None else max_num_seqs + max(1, math.ceil(prompt_tokens))


def predicted_lengths(
    calibrations: Sequence[tuple[str, Results]], mix: Mix, sample: LengthSample | None
) -> LengthSample:
    """What a predicted level's requests draw: the plan's dataset sample where given, else the asked
    means in the shape every calibration sweep asked for (e.g. outputs uniform within 25%: a re-measurement
    with the same profile sends that), else fixed lengths."""
    if sample is not None:
        return sample
    shapes = {(shape_of(r.settings.prompt_tokens), shape_of(r.settings.output_tokens)) for _, r in calibrations}
    if len(shapes) != 1:
        return LengthSample.fixed(mix.prompt_tokens, mix.output_tokens)
    settings = calibrations[0][1].settings
    return LengthSample.shaped(mix, settings.prompt_tokens, settings.output_tokens)


def calibration_residual(
    engine: EngineConfig, calibrations: Sequence[tuple[str, Results]], budget: int | None, kv: int | None
) -> TtftResidual | None:
    """Each calibration level's TTFT p50, p95 and mean (those it gives) beside the same statistics of ``engine`` run closed-loop
    at that sweep's mix and the level's concurrency (with the calibration server's token ``budget`` per
    step and ``kv`` capacity, where known), its lengths drawn as the sweep asked for them: the residual
    line ``planner.laws.ttft_residual`` fits, its growth per client in proportion to each sweep's prompt's
    prefill alone (``TtftResidual.at_prompt`` reads it at another prompt)."""
    rows = []
    for name, results in calibrations:
        mix, calibrated = calibrated_levels(results, name)
        closed = [(lv, level) for lv, level in calibrated if level.load.kind == "concurrency"]
        if not closed:
            continue
        lengths = LengthSample.shaped(mix, results.settings.prompt_tokens, results.settings.output_tokens)
        cap = max(round(level.load.value) for _, level in closed)  # the server's is at least this: unsaturated
        served = engine.serving(cap, closed_loop_budget(budget, cap, mix.prompt_tokens), kv)
        prefill = alone_prefill_ms(engine, mix.prompt_tokens, budget)
        for lv, level in closed:
            simulated = run_closed_loop(served, round(level.load.value), lengths)
            label = f"{name} {lv.label}"
            for q in STATISTICS:
                measured = level.mean_ms(Metric.TTFT) if q is None else level.percentile_ms(Metric.TTFT, q)
                if measured is not None:
                    rows.append(
                        ResidualRow(
                            label=label,
                            clients=lv.concurrency,
                            prompt_tokens=mix.prompt_tokens,
                            percentile=q,
                            measured_ms=measured,
                            simulated_ms=simulated.ttft_ms_at(q),
                            prefill_ms=prefill,
                        )
                    )
    return fit_ttft_residual(rows)
