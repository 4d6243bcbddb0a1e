"""Each calibration mix predicted by the length model fitted on the others: how far a mix not measured is off (pure).

A bootstrap over a calibration's levels holds their noise, not the error of the law's shape between
mixes, and on published tables of real engines that error was the larger. So with three mixes or more,
each is left out in turn and predicted from the rest, and every TPOT predicted for a mix not measured is
widened to the errors seen (``LengthModel.tpot_range``). A left-out mix the rest determine only up to a
split of their slopes (``planner.laws.slope_split``) is judged against that whole range: the point of a
split the data cannot choose is no prediction, and three mixes would otherwise be judged by two-mix
guesses (NIM 70B's 1,000/1,000, from 200/200, 5,000/500 and 500/2,000: held-out errors of 26% from the
split alone, and a max batch of 39 where the table holds 74). That is done only where the whole
calibration leaves ranges too: where its mixes determine every slope term, a point answers the asked
mix, and the held-out points are judged as points.
"""

from __future__ import annotations

from planner.laws.lengthmodel import (
    CalibrationPoint,
    LengthModel,
    fit_length_model,
    reach,
    strata,
    tpot_features,
)
from planner.laws.mix_error import HeldOut
from planner.laws.slope_split import slope_range, slopes_determined

MIN_MIXES = 3  # two leave one, which predicts no other


def hold_out(model: LengthModel) -> HeldOut | None:
    """``model``'s calibration with each mix left out and predicted from the others' fit (no bootstrap); None
    with fewer than ``MIN_MIXES`` mixes."""
    rows = model.points
    mixes = strata(rows)
    if len(mixes) < MIN_MIXES:
        return None
    ranged = not slopes_determined(model)  # the plan answers with ranges of splits: judge the held-out alike
    errors: list[float] = []
    batches: list[float] = []
    reaches: list[float] = []
    predicted, unpredicted = [], []
    for groups in mixes:
        kept = [p for p in rows if p.group not in groups]
        left = [p for p in rows if p.group in groups and p.kind == "tpot"]
        if not left or sum(p.kind == "tpot" for p in kept) < 2:
            continue
        rest = fit_length_model(kept, statistic=model.statistic, budget=model.budget, bootstrap=0)
        found = _errors(rest, left, ranged)
        if found is None:
            unpredicted.append(left[0].mix.label)
            continue
        predicted.append(left[0].mix.label)
        errors += found
        batches += [p.batch for p in left]
        reaches += [reach(left[0].mix, [p.mix for p in kept])] * len(left)
    return HeldOut(
        tpot_errors=tuple(errors),
        batches=tuple(batches),
        reaches=tuple(reaches),
        mixes=tuple(predicted),
        unpredicted=tuple(unpredicted),
    )


def _errors(rest: LengthModel, left: list[CalibrationPoint], ranged: bool) -> list[float] | None:
    """How far each of one mix's ``left`` rows lies from what ``rest`` predicts for it, relative to the
    measured value; ``ranged`` (the whole calibration leaves ranges of splits too): 0 inside the range of the
    slope's splits, else the distance to its nearer end (None: the rest cannot predict the mix)."""
    mix = left[0].mix
    law = rest.at_mix(mix)
    if law is None:
        return None
    split = slope_range(rest, mix) if ranged else None
    out = []
    for point in left:
        p = rest.predict(tpot_features(point.batch, point.mix))
        if p is None:
            return None
        low, high = p.value_ms, p.value_ms
        if split is not None:
            low += (split[0] - law.per_seq_ms) * point.batch
            high += (split[1] - law.per_seq_ms) * point.batch
        measured = point.value_ms
        out.append(low / measured - 1.0 if measured < low else high / measured - 1.0 if measured > high else 0.0)
    return out
