"""When a sweep stops early (pure): a level breaching an SLO badly, or the levels' own saturation verdict.

Saturation is the verdict every command shows (``planner.evidence.verdicts``: two
independent signals must agree), so the sweep never stops on a level that
the plan then calls unsaturated. A single noisy step cannot stop it.

``min_throughput_gain`` is a named, opt-in heuristic for users who want the
older rule: stop once two consecutive levels each gained less than that
fraction of throughput.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.level.result import LevelResult
from loadgen.slo_target import SloTarget
from planner.evidence.verdicts import judge


def throughput_gain(previous: LevelResult, current: LevelResult) -> float | None:
    """Relative change in output tokens/s from one level to the next (None without data)."""
    a, b = previous.output_tokens_per_s, current.output_tokens_per_s
    if not a or b is None:
        return None
    return b / a - 1.0


def stop_reason(
    levels: Sequence[LevelResult],
    slos: Sequence[SloTarget],
    *,
    slo_breach_factor: float | None = 2.0,
    stop_on_saturation: bool = True,
    min_throughput_gain: float | None = None,
) -> str | None:
    """Why the sweep should stop after its last level, or None to go on (a pooling sweep: go on to the next
    batch size; ``loadgen.run.session`` skips the rest of this one's levels)."""
    if not levels:
        return None
    last = levels[-1]
    levels = [lv for lv in levels if lv.load.batch == last.load.batch]  # its own series (pooling batch sizes)
    if slo_breach_factor is not None:
        for slo in slos:
            value = slo.value(last)
            if value is not None and value > slo.limit * slo_breach_factor:
                return (
                    f"stopped after {last.load.label}: {slo.key} = {value:.4g} breaches the SLO "
                    f"({slo.limit:g}) by more than {slo_breach_factor:g}x"
                )
    if not stop_on_saturation or len(levels) < 2:
        return None
    verdict = judge(levels).of(last.load.label)
    if verdict.state == "saturated":
        return f"stopped after {last.load.label}: saturated ({', '.join(verdict.signals) or 'after the knee'})"
    if min_throughput_gain is not None and len(levels) >= 3:
        gains = [throughput_gain(a, b) for a, b in zip(levels[-3:], levels[-2:])]
        if all(g is not None and g < min_throughput_gain for g in gains):
            return (
                f"stopped after {last.load.label}: the throughput heuristic (two levels in a row gained less "
                f"than {min_throughput_gain:.0%}: {', '.join(f'{g:+.1%}' for g in gains if g is not None)})"
            )
    return None
