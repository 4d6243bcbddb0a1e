"""A sweep not run: the engine a mix plan fitted, served by the simulator in virtual time at the asked mix.

The length model answers for a mean step. What a closed loop at concurrency c sees for TTFT depends
on how each prompt joins a running batch, which the simulator's engine reproduces step by step with
the fitted terms (base, per sequence, KV read, prefill per token). So ``plan --predict-levels`` runs
that engine closed-loop at each concurrency, in virtual time (no sockets to a real server, seconds
of CPU), and states TTFT with the overhead the fit found beyond the engine (network, HTTP,
tokenisation). The engine has no step noise, so TPOT p95 comes from the length model fitted on
TPOT p95 at that batch, and TTFT p95 holds only the schedule's spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from loadgen.inputs.profile import parse_profile
from loadgen.results import Metric, Results
from loadgen.run.execute import execute
from loadgen.run.session import Scrape, SessionHooks
from loadgen.run.sweep import TargetOptions, session_from_profile
from loadgen.sim.engine import EngineConfig
from loadgen.sim.openai_app import SimOptions
from planner.lengthmodel import LengthModel, Mix, tpot_features
from planner.mixplan import PredictedLevel

LIFETIMES = 12  # measured window per level, in request lifetimes at that level's batch
WARMUP_LIFETIMES = 2


def predict_levels(
    engine: EngineConfig,
    mix: Mix,
    levels: Sequence[int],
    *,
    overhead_ms: float,
    tpot_p95: LengthModel,
    seed: int,
) -> tuple[PredictedLevel, ...]:
    """Each closed-loop level served by ``engine`` at ``mix`` in virtual time, TTFT plus ``overhead_ms``."""
    step = engine.base_ms + (engine.per_seq_ms + engine.per_kv_ms * mix.context_tokens / 1000) * max(levels)
    lifetime_s = (step * mix.output_tokens + engine.prefill_ms_per_token * mix.prompt_tokens) / 1000
    profile = parse_profile(
        {
            "schema_version": 1,
            "name": "predicted",
            "target": "sim",
            "api": "completions",
            "workload": {"prompt_tokens": round(mix.prompt_tokens), "output_tokens": round(mix.output_tokens)},
            "load": {
                "mode": "closed",
                "levels": list(levels),
                "duration_s": math.ceil(LIFETIMES * lifetime_s),
                "warmup_s": math.ceil(WARMUP_LIFETIMES * lifetime_s),
            },
            "seed": seed,
        },
        "--predict-levels",
    )
    results = execute(
        None,
        SimOptions(engine=engine, max_model_len=1 << 30),
        # the server's own counters are not read from a predicted sweep: scraping them cost a fifth of its CPU
        lambda url: session_from_profile(profile, url, TargetOptions(scrape=Scrape.OFF), command="sweep"),
        lambda _: SessionHooks(),
        virtual_time=True,
    )
    return tuple(_level(results, k, overhead_ms, tpot_p95, mix) for k in range(len(results.levels)))


def _level(results: Results, k: int, overhead_ms: float, tpot_p95: LengthModel, mix: Mix) -> PredictedLevel:
    level = results.levels[k]
    c = round(level.load.value)
    ttft50, ttft95 = (level.percentile_ms(Metric.TTFT, q) for q in (50, 95))
    p95 = tpot_p95.predict(tpot_features(c, mix))
    return PredictedLevel(
        c,
        None if ttft50 is None else ttft50 + overhead_ms,
        None if ttft95 is None else ttft95 + overhead_ms,
        level.percentile_ms(Metric.TPOT, 50),
        None if p95 is None else p95.value_ms,
    )
