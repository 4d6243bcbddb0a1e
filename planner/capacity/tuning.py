"""``loadgen tune``'s search: which server configuration to measure next, from the law and the trials so far (pure).

A grid search restarts the server once per cell (vLLM's auto_tune: a 4 x 4 grid is 16 restarts, each minutes
on a GPU). Here the plan's own answer is the first guess, and every measurement brackets the truth: the
largest batch cap (``max_num_seqs``) measured to keep every SLO and the smallest measured to break one. The
next trial is the law's answer (refitted on every level measured so far) inside that bracket, else the
bracket's edge next to the last pass; the search ends when a cap that holds sits right below one that
fails: the neighbour the law says is better was measured and failed. A token budget that TTFT alone
breaks grows by ``BUDGET_GROWTH`` at the same cap (a prompt then prefills in fewer steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.capacity.token_budget import TTFT_MARGIN

BUDGET_GROWTH = 1.5  # at least: as the plan's own budget search grows a budget (``planner.capacity.token_budget``)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialVerdict:
    """What one trial's measurement said of its configuration."""

    seqs: int  # the batch cap it ran with
    budget: int | None  # the token budget per step it ran with (None: not a knob of this search)
    holds: bool | None  # every SLO met at a trusted level; None: no verdict (refused, untrusted, stopped)
    # it failed only on TTFT (or E2E) with a budget that can still grow: the budget, not the cap, is short
    ttft_only: bool = False
    ttft_over: float = 1.0  # then: the worst of those SLOs' measured value over its limit
    # every TTFT (and E2E) SLO met at this budget, whatever else failed (None: no such SLO, or no verdict)
    ttft_held: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NextTrial:
    """The configuration to measure next, or (``seqs`` None) that the search is over; and why."""

    seqs: int | None
    budget: int | None
    why: str
    verified: int | None = None  # the search is over: the cap that holds with its next larger measured failing


def bracket(trials: Sequence[TrialVerdict]) -> tuple[int | None, int | None]:
    """The largest cap measured to hold below the smallest measured to fail (either None where none was)."""
    failed = [t.seqs for t in trials if t.holds is False and not t.ttft_only]
    lowest_fail = min(failed) if failed else None
    held = [t.seqs for t in trials if t.holds and (lowest_fail is None or t.seqs < lowest_fail)]
    return (max(held) if held else None), lowest_fail


def next_trial(
    predicted: int | None, trials: Sequence[TrialVerdict], most_seqs: int, *, lower_bound: bool = False
) -> NextTrial:
    """What to measure after ``trials`` (the calibration excluded), with the law refitted on every level so far
    predicting ``predicted`` as the largest cap that keeps the SLOs (None: it cannot say; ``lower_bound``: at
    least that, the levels never reached the SLO), at most ``most_seqs``."""
    last = trials[-1] if trials else None
    budget = last.budget if last is not None else None
    if last is not None and last.holds is False and last.ttft_only and last.budget is not None:
        # a prompt waits about (prompt / chunk) steps for its first token, the chunk being what the budget
        # leaves beside the running decodes: the chunk grows by the TTFT's overshoot, with the plan's margin
        chunk = max(1, last.budget - last.seqs)
        wanted = last.seqs + math.ceil(chunk * last.ttft_over / TTFT_MARGIN)
        grown = max(math.ceil(last.budget * BUDGET_GROWTH), wanted)
        why = f"only TTFT failed at budget {last.budget} ({last.ttft_over:.2g}x its limit): {grown} prefills in fewer steps"
        return NextTrial(seqs=last.seqs, budget=grown, why=why)
    held, failed = bracket(trials)
    if held is not None and failed is not None and held + 1 >= failed:
        budget = next(t.budget for t in reversed(trials) if t.seqs == held and t.holds)
        why = f"{held} holds every SLO as measured and {failed}, the next larger cap, fails"
        return NextTrial(seqs=None, budget=budget, why=why, verified=held)
    low = (held or 0) + 1
    high = min(most_seqs, failed - 1 if failed is not None else most_seqs)
    if low > high:
        if held is None:
            return NextTrial(seqs=None, budget=budget, why="no cap holds: even 1 fails")
        budget = next(t.budget for t in reversed(trials) if t.seqs == held and t.holds)
        return NextTrial(
            seqs=None,
            budget=budget,
            why=f"{held} holds every SLO as measured and no larger cap is allowed",
            verified=held,
        )
    if predicted is None:
        guess, reason = (low + high) // 2, "the law gives no answer: the bracket's middle"
    elif lower_bound and held is not None and failed is None:
        # "at least N" from levels that never crossed: each step at least doubles what held
        guess = min(high, max(predicted, 2 * held))
        reason = f"the levels only say at least {predicted}, and {held} holds as measured: {guess}"
    elif low <= predicted <= high and predicted not in {t.seqs for t in trials}:
        guess, reason = predicted, "the law's answer on every level measured so far"
    elif held is not None and failed is not None:
        guess = (held + failed) // 2
        said = f"only say at least {predicted}" if lower_bound else f"put it at {predicted}"
        reason = f"the levels {said}: between {held}, which holds, and {failed}, which fails"
    elif held is not None:
        # a law that keeps answering below what holds is behind: each step up doubles (1, 2, 4, ...), and an
        # answer that is only a lower bound doubles what held, so a wrong law costs a few restarts, not dozens
        ups = sum(1 for t in trials if t.holds and t.seqs > predicted)
        guess = min(high, held + 2**ups)
        reason = f"the levels say {predicted}, but {held} holds as measured: {guess}"
    elif failed is not None:
        downs = sum(1 for t in trials if t.holds is False and not t.ttft_only)
        guess = max(1, min(high, failed - 2 ** max(0, downs - 1)))
        reason = f"the law says {predicted}, but {failed} fails as measured: {guess}"
    else:
        guess, reason = high, f"the law says {predicted}, past the largest cap allowed"
    budget, note = budget_for(guess, trials, budget)
    return NextTrial(seqs=guess, budget=budget, why=reason + note)


def budget_for(seqs: int, trials: Sequence[TrialVerdict], budget: int | None) -> tuple[int | None, str]:
    """The token budget to try a cap of ``seqs`` with: the last budget that held every TTFT SLO at a smaller cap,
    the chunk it left beside the decodes grown in proportion to the cap. In a closed loop a cap of c finishes
    about c / output requests a step, so the prefill each step must carry grows with it; a budget sized for
    24 sequences, kept at 54, failed TTFT at 3.5x its limit on the simulator, and the restart that grew it
    after the fact overshot into TPOT. Never below ``budget``; with what the trial's reason adds."""
    held = next((t for t in reversed(trials) if t.ttft_held and t.budget is not None), None)
    if budget is None or held is None or held.budget is None or seqs <= held.seqs:
        return budget, ""
    grown = max(budget, seqs + math.ceil((held.budget - held.seqs) * seqs / held.seqs))
    return grown, f"; budget {grown}, the prefill that held TTFT at a smaller cap grown with the cap"


def ttft_only(failures: Mapping[str, bool]) -> bool:
    """Whether the SLOs that failed (key -> failed) are all TTFT or E2E ones: what a larger budget helps."""
    failed = [key for key, bad in failures.items() if bad]
    return bool(failed) and all(key.startswith(PREFILL_BOUND) for key in failed)


PREFILL_BOUND = ("ttft", "e2e")  # the SLO keys a larger token budget shortens
