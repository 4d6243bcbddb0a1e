"""Exact decimal arithmetic for integer boundaries (pure).

``(25.7 - 25) / 0.1`` is ``6.999999999999993`` in binary floats, and a bare
floor turns the answer 7 into 6. Reading each float as the decimal it prints
as (``Fraction(repr(x))``) makes the law's arithmetic exact for the numbers a
user typed or a report shows.
"""

from __future__ import annotations

from fractions import Fraction


def exact(x: float | int) -> Fraction:
    """The decimal value ``x`` prints as, exactly."""
    return Fraction(repr(float(x))) if not isinstance(x, int) else Fraction(x)
