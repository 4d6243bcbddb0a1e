"""How far the length model's prediction for a mix it did not fit can be off, as its own calibration shows (pure).

``planner.laws.held_out`` leaves each calibration mix out and predicts it from the others; this record
holds the errors and turns them into the share every TPOT predicted for a mix not measured is widened by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

HELD_OUT_QUANTILE = 100.0  # the held-out errors near a batch: an interval widened to the largest of them
NEAREST_ROWS = 5  # held-out rows a batch's widening reads at least


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldOut:
    """Each calibration mix predicted by the model fitted on the others: how far a mix not measured is off.

    A bootstrap over one calibration's levels holds their noise, not the error of the law's shape between
    mixes; on published tables of real engines that error was the larger (TPOT within 5% at only half the
    levels of a mix left out, while every bootstrap interval was narrower). So with three mixes or more
    each is left out in turn, and every TPOT prediction's interval is widened to the errors seen."""

    tpot_errors: tuple[float, ...]  # predicted / measured - 1, each TPOT row of each mix the others predict
    batches: tuple[float, ...]  # each error's batch
    reaches: tuple[float, ...]  # how far its mix lay outside the others' lengths (``reach``)
    mixes: tuple[str, ...]  # the mixes predicted, e.g. "prompt 200 / output 200"
    unpredicted: tuple[str, ...] = ()  # mixes the others cannot answer for (a length only they had)

    def widening(self, batch: float | None = None, reach: float | None = None) -> float:
        """The share each side of a prediction at ``batch`` for a mix ``reach`` outside the calibration is
        widened by: the ``HELD_OUT_QUANTILE`` of the |errors| of the held-out mixes that reached no further
        (at least the nearest one's) and, among their rows, those within a factor of two of the batch (at
        least the ``NEAREST_ROWS`` nearest). The law's shape errs most where real steps bend, at the largest
        batches (NIM 8B's held-out mixes: 1-3% below batch 50, up to 22% past 180), and most for a mix far
        outside the others (NIM 70B's 20,000-token prompts from prompts of 200-1,000: +112%), which says
        nothing of a mix between calibrated ones. None: every row."""
        if not self.tpot_errors:
            return 0.0
        errors, batches = np.abs(self.tpot_errors), np.asarray(self.batches)
        if reach is not None:
            reaches = np.asarray(self.reaches)
            kept = reaches <= float(reaches.min()) + 1e-9 if reach == 0 else reaches >= 0
            errors, batches = errors[kept], batches[kept]
        if batch is not None and batch > 0:
            distance = np.abs(np.log(np.maximum(batches, 1e-9) / batch))
            near = distance <= math.log(2)
            if near.sum() < NEAREST_ROWS:
                near = distance <= np.sort(distance)[min(NEAREST_ROWS, len(distance)) - 1]
            errors = errors[near]
        return float(np.percentile(errors, HELD_OUT_QUANTILE))

    @property
    def text(self) -> str:
        """e.g. "held out on your own calibration (each of 4 mixes predicted from the others): TPOT median
        |error| 3.1%, largest 8.2%"."""
        if not self.tpot_errors:
            return ""
        errors = np.abs(self.tpot_errors)
        return (
            f"held out on your own calibration (each of {len(self.mixes)} mixes predicted from the others): TPOT "
            f"median |error| {float(np.median(errors)):.1%}, largest {self.widening():.1%}"
            " (each predicted TPOT's interval is widened to the largest near its batch)"
            + (f"; not predictable from the others: {', '.join(self.unpredicted)}" if self.unpredicted else "")
        )
