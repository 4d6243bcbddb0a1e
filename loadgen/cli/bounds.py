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
        rule.append(f"{'>' if exclusive else '>='} {minimum:g}")
    if maximum is not None:
        rule.append(f"<= {maximum:g}")
    raise UsageError(f"{flag}: expected a finite number {' and '.join(rule)}, got {value:g}".replace("  ", " "))
