"""The token budget per step a plan recommends (vLLM's ``--max-num-batched-tokens``), checked by simulation (pure).

Two SLOs pull it apart. A step that carries a prefill chunk beside the decodes is longer, so the per-token
latency (ITL, TPOT) wants small chunks: ``planner.capacity.mix_forecast.recommended_budget`` gives the largest
chunk with which such a step stays under the ITL (or TPOT) limit. A long prompt prefilled in small chunks
waits for many steps, and the prompts that arrive together queue behind each other's chunks, so TTFT wants
large ones: on the simulator (law 12 + 0.35 seqs + 0.9 KV/1k + 0.04 prefill tokens, prompts of 2,048) the
per-step bound said 87 tokens, at which TTFT p95 read 2.8 s against a 1.5 s SLO that a budget of 512 met.

So the bound is only a candidate: the sizing simulation runs it at the plan's replicas and load, and where a
TTFT, E2E or TPOT SLO fails there, larger budgets are tried (the per-request TPOT the simulation measures
averages a chunk's stall over the answer; the per-step bound does not) until the smallest that meets every
SLO it judges. An ITL SLO is per token, which the simulation does not time: it keeps the bound.

TTFT is what a fitted engine predicts least well (real engines read 15-70% above the prediction in the
checks that led here, methodology §1.1: TTFT tails are the hardest), and the smallest budget that passes
sits on the SLO's edge by construction: on that same simulator case the budget that just passed the
fitted engine (215) left the true law unsettled at 1,485 ms. So a budget passes only with TTFT and E2E
at most ``TTFT_MARGIN`` of their limits; TPOT, which the length model predicts within a few percent,
keeps its limit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from loadgen.engine import EngineConfig
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner.capacity.mix_forecast import recommended_budget
from planner.laws.stepmodel import StepModel

GROWTH = 1.5  # each larger budget tried is this much the one before, up to a whole prompt beside the batch
TTFT_MARGIN = 0.8  # a budget passes with TTFT and E2E at most this share of their limits


_MARGIN_TEXT = f"TTFT and E2E within {TTFT_MARGIN:.0%} of their limits"


def with_margin(slos: tuple[SloTarget, ...]) -> tuple[SloTarget, ...]:
    """The SLOs a budget is checked against: TTFT and E2E at ``TTFT_MARGIN`` of their limits."""
    return tuple(
        dataclasses.replace(s, limit=s.limit * TTFT_MARGIN) if s.metric in (Metric.TTFT, Metric.E2E) else s
        for s in slos
    )


def checked_budget(
    law: StepModel,
    engine: EngineConfig,
    batch: int,
    slos: tuple[SloTarget, ...],
    prompt_tokens: float,
    holds: Callable[[int], bool] | None,
    where: str,
) -> tuple[int | None, str]:
    """The budget to recommend and why: the per-step bound where the simulation (``holds``: every SLO it judges
    met with that budget, ``where`` it ran, e.g. "at 7 replicas and 10 requests/s") agrees, else the smallest
    larger budget it passes; ``holds`` None: not simulated, said."""
    latency = next((s for s in slos if s.metric == Metric.ITL), None) or next(
        (s for s in slos if s.metric == Metric.TPOT), None
    )
    if latency is None:
        return None, "no ITL or TPOT SLO to keep a prefill chunk under"
    bound, why = recommended_budget(law, engine, batch, latency.limit, prompt_tokens)
    if bound is None:
        return None, why
    if holds is None:
        return bound, f"{why}; not checked against the TTFT SLOs (no simulation ran)"
    if holds(bound):
        return bound, f"{why}; the sizing simulation {where} meets every SLO with it ({_MARGIN_TEXT})"
    whole = max(bound + 1, math.ceil(prompt_tokens) + batch)  # past this, a prompt prefills in one step
    if latency.metric == Metric.ITL:
        return None, (
            f"{why}, but with it the sizing simulation {where} breaks a TTFT or E2E SLO, and a larger budget would "
            f"break {latency.key} in every step that carries a chunk: no budget meets both (add replicas, or "
            "relax one SLO)"
        )
    failed, budget = bound, bound
    while budget < whole:
        budget = min(whole, math.ceil(budget * GROWTH))
        if holds(budget):
            break
        failed = budget
    else:
        return None, (
            f"{why}, but with it the sizing simulation {where} breaks an SLO, and so does every budget up to "
            f"{whole} (a whole prompt beside the batch): no budget meets every SLO there"
        )
    while budget - failed > max(1, budget // 50):  # the smallest that passes, within 2%
        mid = (failed + budget) // 2
        failed, budget = (failed, mid) if holds(mid) else (mid, budget)
    return budget, (
        f"the smallest budget with which the sizing simulation {where} meets every SLO ({_MARGIN_TEXT}; each "
        f"request's TPOT as simulated, chunks' stalls included); {bound} would keep every step under {latency.limit:g} ms ({why}), "
        "but with it long prompts wait for many small chunks and an SLO breaks"
    )
