"""The one threshold grammar, for ``--slo`` (and so a plan's SLOs) and ``gate --require`` / ``--fail-if`` (pure).

::

    QUANTITY OP VALUE[UNIT] [@LEVEL]

    QUANTITY  ttft|ttft_sent|ttfo|tpot|itl|e2e|queue|lag _ pNN|mean|max   (ms)
              error_rate | goodput_ratio                             (fraction; "1%" works)
              output_tokens_per_s | requests_per_s | achieved_concurrency
    OP        <  <=  >  >=
    UNIT      ms | s | %
    LEVEL     c=32 or r=2.5 (default: every level)

Latencies are read in ms (``2s`` is 2000), ratios as fractions (``1%`` is 0.01), rates as plain numbers.
An SLO (``parse_slo`` in ``planner.capacity.batch_limit``) is the subset that states a promise: a latency's
percentile or mean, or the error rate, held at most (``<`` or ``<=``) at every level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loadgen.quantity import Quantity
from planner.evidence.level_values import RATES, RATIOS

_THRESHOLD = re.compile(
    r"^\s*(?P<q>[a-z0-9_]+(?:\.\d+)?)\s*(?P<op><=|>=|<|>)\s*(?P<num>-?\d+(?:\.\d+)?)\s*(?P<unit>ms|s|%)?"
    r"\s*(?:@\s*(?P<level>[cr]=\d+(?:\.\d+)?))?\s*$"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Threshold:
    """One condition as written: a quantity, an operator and a value in the quantity's own unit."""

    text: str  # as the user wrote it
    quantity: str  # a latency quantity's key (``tpot_p95``), or a ratio's or rate's name
    op: str  # < <= > >=
    value: float  # ms for latencies, a fraction for ratios, a plain number for rates
    level: str | None = None  # a load label such as "c=32"; None: every level
    latency: Quantity | None = None  # the latency quantity, where it is one


class ThresholdSyntaxError(ValueError):
    """The text is not ``QUANTITY OP VALUE[UNIT] [@LEVEL]`` at all (the caller says what it expected)."""


class UnknownQuantity(ValueError):
    """The quantity is none the grammar knows (the message names what it knows)."""


def parse_threshold(text: str, flag: str) -> Threshold:
    """Read ``text`` (given with ``flag``, which each error names); units normalised, ratios bounded.

    Raises ``ThresholdSyntaxError`` when the shape is wrong, ``UnknownQuantity`` for a name it does not know,
    and ``ValueError`` naming the problem otherwise (a unit the quantity does not take, a ratio past 1)."""
    m = _THRESHOLD.match(text)
    if not m:
        raise ThresholdSyntaxError(text)
    name, unit, value = m.group("q"), m.group("unit"), float(m.group("num"))
    latency = None
    if name in RATIOS:
        if unit in ("ms", "s"):
            raise ValueError(f"{flag} {text!r}: {name} is a fraction (0.01 or 1%)")
        value = value / 100 if unit == "%" else value
        if not 0 <= value <= 1:
            raise ValueError(f"{flag} {text!r}: {name} is a fraction between 0 and 1 (0% to 100%)")
    elif name in RATES:
        if unit is not None:
            raise ValueError(f"{flag} {text!r}: {name} takes a plain number")
    else:
        try:
            latency = Quantity.parse(name)
        except ValueError as exc:
            raise UnknownQuantity(f"{flag} {text!r}: {exc}, or one of {', '.join(RATIOS + RATES)}") from None
        if unit == "%":
            raise ValueError(f"{flag} {text!r}: a latency takes ms or s")
        name, value = latency.key, value * 1000 if unit == "s" else value
    level = m.group("level").replace(" ", "") if m.group("level") else None
    return Threshold(text=text.strip(), quantity=name, op=m.group("op"), value=value, level=level, latency=latency)
