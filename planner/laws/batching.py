"""Static vs continuous batching: slot-step utilisation for a set of output lengths (pure)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchUtilization:
    useful_slot_steps: int  # one generated token each
    static_slot_steps: int  # a static batch holds every slot until its longest member finishes
    static: float  # useful / static slot-steps
    continuous: float  # continuous batching frees a slot the step after it finishes: 1.0


def batch_utilization(lengths: npt.ArrayLike) -> BatchUtilization:
    """Utilisation of one static batch with these output lengths.

    Examples
    --------
    >>> u = batch_utilization([3, 3, 3, 10])
    >>> (u.useful_slot_steps, u.static_slot_steps, u.static)
    (19, 40, 0.475)
    """
    n = np.asarray(lengths)
    if n.ndim != 1 or n.size == 0:
        raise ValueError("lengths must be a non-empty one-dimensional list")
    if not np.issubdtype(n.dtype, np.integer) or (n < 1).any():
        raise ValueError("lengths must be positive integers")
    useful = int(n.sum())
    slots = int(n.size * n.max())
    return BatchUtilization(useful_slot_steps=useful, static_slot_steps=slots, static=useful / slots, continuous=1.0)
