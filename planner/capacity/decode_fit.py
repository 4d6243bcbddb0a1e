"""The decode step of a sweep whose prompts cost time, fitted by running its closed loop (pure).

A law fitted on TPOT holds prefill's share of the steps on average; taking ``prefill x prompt / output``
per running sequence back out of it (``planner.capacity.prefill.decode_law``) assumes every prompt is
prefilled among decoding steps. Clients of a closed loop that finish together are sent together, and
their prefills land in each other's wait for a first token, not in a running stream's TPOT: the slope
then holds less than that share, the subtraction leaves no decode slope, and the prefill is cut to fit.
On the simulator (10 + 0.5b ms, 0.4 ms per prompt token, prompt 100, output 30, c = 1, 4, 16) it read a
decode slope of 0 and a prefill of 0.295, and the sizing simulation a TTFT p95 of 187 ms where the
server served 500.

Here the prefill measured at an idle server stays as measured, and the decode terms are the ones under
which the same closed loop (``planner.simulation.closed_loop``), run at the sweep's mix and each of
its levels, reads the TPOT means the sweep measured: the slope searched so that the busiest level
matches, the base so that the lowest does, and every level checked. It recovers the simulator's law above exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from loadgen.engine import EngineConfig
from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from planner.laws.lengthsample import LengthSample
from planner.laws.stepmodel import StepModel
from planner.simulation.closed_loop import run_closed_loop

SEARCH_STEPS = 13  # golden-section steps: the slope's bracket shrinks to 0.0019 of its width
MEANS_PER_CLIENT = 6  # requests a client measured in each of the search's closed loops: TPOT means, not tails
PREFILL_MATTERS = 0.25  # prefill's share of the fitted slope above which the subtraction is not trusted
FIT_TOLERANCE = 0.05  # RMS relative miss of the levels' TPOT means above which the fit is not taken


def decode_by_simulation(
    fit: StepModel,
    levels: Sequence[LevelResult],
    prefill_ms_per_token: float,
    prompt_tokens: float,
    output_tokens: float,
) -> StepModel | None:
    """The decode law (base, slope) whose closed loop, with this prefill, reads the levels' TPOT means;
    None where the levels cannot say (fewer than two closed-loop levels with a TPOT mean) or no such law
    reads them within ``FIT_TOLERANCE`` (a prefill too large for them: the subtraction then decides)."""
    measured = [
        (round(lv.load.value), mean)
        for lv in levels
        if lv.load.kind == "concurrency" and (mean := lv.mean_ms(Metric.TPOT)) is not None
    ]
    if len({c for c, _ in measured}) < 2 or output_tokens < 2:
        return None
    measured.sort()
    lengths = LengthSample.fixed(prompt_tokens, output_tokens)
    seats = max(c for c, _ in measured)

    def engine(base: float, slope: float) -> EngineConfig:
        return EngineConfig(base_ms=base, per_seq_ms=slope, prefill_ms_per_token=prefill_ms_per_token,
                            max_num_seqs=seats)  # fmt: skip

    def tpot(e: EngineConfig, clients: int) -> float:
        value = run_closed_loop(e, clients, lengths, per_client=MEANS_PER_CLIENT).tpot_ms_at(None)
        return math.inf if value is None else value

    def base_for(slope: float) -> float:
        """The base under which the lowest level's closed loop reads its measured TPOT mean."""
        clients, target = measured[0]
        guess = max(target - slope * clients, 0.0)
        return max(guess + target - tpot(engine(guess, slope), clients), 0.0)

    def error(base: float, slope: float, levels: Sequence[tuple[int, float]]) -> float:
        e = engine(base, slope)
        return sum((tpot(e, c) / t - 1) ** 2 for c, t in levels)

    # the slope searched at the busiest level (the base holds the lowest), then every level checked
    busiest = measured[-1:]
    slope = _golden_minimum(lambda x: error(base_for(x), x, busiest), 0.0, max(fit.per_seq_ms, 0.0) * 2 + 0.1)
    base = base_for(slope)
    if math.sqrt(error(base, slope, measured) / len(measured)) > FIT_TOLERANCE:
        return None  # no base and slope beside this prefill read the levels: the prefill does not fit them
    law = fit.plus_per_seq(slope - fit.per_seq_ms)
    ci = law.base_ci_ms
    shift = base - law.base_ms
    return dataclasses.replace(
        law, base_ms=base, base_ci_ms=None if ci is None else (ci[0] + shift, ci[1] + shift), warnings=()
    )


def _golden_minimum(f: Callable[[float], float], low: float, high: float) -> float:
    """Where ``f`` is least in ``[low, high]`` (golden-section search, ``SEARCH_STEPS`` steps; one minimum)."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = f(a), f(b)
    for _ in range(SEARCH_STEPS):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = f(a)
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = f(b)
    return (low + high) / 2
