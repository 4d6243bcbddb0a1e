"""Bounds on numeric flags: every number finite and in range, or one line naming the flag (exit 2).

A NaN passes every comparison, so ``--duration nan`` once ran forever; an
absurd size (``--concurrency 100000000``, ``--prompt-tokens 300000000``)
once tried to build it. The maxima are ``loadgen.limits``, shared with every other reader.
"""

from __future__ import annotations

import math
from typing import TypeVar

from loadgen.errors import UsageError

N = TypeVar("N", int, float)


def bounded(
    flag: str, value: N | None, *, minimum: float | None = None, exclusive: bool = False, maximum: float | None = None
) -> N | None:
    """``value`` when finite and within the bounds (None passes through), else a UsageError naming ``flag``."""
    if value is None:
        return None
    low_ok = minimum is None or value > minimum or (not exclusive and value == minimum)
    if math.isfinite(value) and low_ok and (maximum is None or value <= maximum):
        return value
    rule = []
    if minimum is not None:
        rule.append(f"{'>' if exclusive else '>='} {minimum:,g}")
    if maximum is not None:
        rule.append(f"<= {maximum:,g}")
    raise UsageError(f"{flag}: expected a finite number {' and '.join(rule)}, got {value:g}".replace("  ", " "))


#: Each numeric flag of ``run`` and ``sweep`` that sets a profile field, and that field's path in
#: ``BOUNDS``: the flag and the profile key are refused alike, each message naming its own spelling.
FLAG_FIELDS: dict[str, str] = {
    "--concurrency": "load.levels (closed)",
    "--rate": "load.levels (open)",
    "--time-scale": "load.levels (trace)",
    "--trace-block-tokens": "load.trace_block_tokens",
    "--duration": "load.duration_s",
    "--requests": "load.requests",
    "--warmup": "load.warmup_s",
    "--ramp-up": "load.ramp_up_s",
    "--burstiness": "load.burstiness",
    "--max-in-flight": "load.max_in_flight",
    "--min-requests": "load.min_requests",
    "--retries": "load.retries",
    "--prompt-tokens": "workload.*_tokens.mean",
    "--max-tokens": "workload.*_tokens.mean",
    "--prompt-spread": "workload.*_tokens.spread",
    "--output-spread": "workload.*_tokens.spread",
    "--dataset-max-words": "workload.dataset_max_words",
    "--turns": "workload.turns",
    "--think-time": "workload.think_time_s",
    "--batch": "workload.batch_sizes",
}


def field_flag(flag: str, value: N | None) -> N | None:
    """``value`` when within the bound of the profile field ``flag`` sets, else one line naming ``flag``."""
    from loadgen.inputs.profile import BOUNDS

    bound = BOUNDS[FLAG_FIELDS[flag]]
    return bounded(flag, value, minimum=bound.minimum, exclusive=bound.exclusive, maximum=bound.maximum)
