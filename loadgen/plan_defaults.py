"""The planning settings' defaults: one home for the profile reader, the command line and the planner.

A default written in each of them drifts (0.8 was written seven times in five files); each reads it here.
"""

from __future__ import annotations

from typing import Final

MAX_UTILIZATION: Final = 0.8  # the share of a replica's measured capacity a plan fills (headroom for bursts)
MAX_REGRESSION: Final = 0.05  # the default tolerance: a 10% regression is past it, not at its edge
