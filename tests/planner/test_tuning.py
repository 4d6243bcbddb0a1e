"""loadgen tune's search (issue 72): the law's answer inside the bracket the measurements leave (pure)."""

from __future__ import annotations

import math

from planner.capacity.tuning import TrialVerdict, bracket, next_trial, ttft_only


def verdict(
    seqs: int, holds: bool | None, budget: int | None = None, ttft: bool = False, over: float = 1.0
) -> TrialVerdict:
    return TrialVerdict(seqs=seqs, budget=budget, holds=holds, ttft_only=ttft, ttft_over=over)


def test_the_first_trial_is_the_laws_answer() -> None:
    first = next_trial(37, [], most_seqs=256)
    assert first.seqs == 37 and first.why == "the law's answer on every level measured so far"


def test_a_cap_that_holds_is_verified_by_its_neighbour_failing() -> None:
    assert next_trial(37, [verdict(37, True)], 256).seqs == 38  # the law's answer was measured: its neighbour
    done = next_trial(37, [verdict(37, True), verdict(38, False)], 256)
    assert (
        done.seqs is None
        and done.why == "37 holds every SLO as measured and 38, the next larger cap, fails"
        and done.verified == 37
    )


def test_a_law_that_was_optimistic_moves_down_within_the_bracket() -> None:
    after_fail = next_trial(36, [verdict(40, False)], 256)  # refitted on the failing level: 36
    assert after_fail.seqs == 36
    stubborn = next_trial(45, [verdict(40, False)], 256)  # a law that still says more than what failed
    assert stubborn.seqs == 39 and "40 fails as measured" in stubborn.why
    assert next_trial(45, [verdict(40, False), verdict(39, False)], 256).seqs == 37  # steps down double


def test_a_law_that_was_pessimistic_moves_up_from_what_held() -> None:
    assert next_trial(50, [verdict(37, True)], 256).seqs == 50
    assert next_trial(30, [verdict(37, True)], 256).seqs == 39  # never below what held as measured
    # a law stuck below what holds (a calibration saturated at another budget): steps up double, 1, 2, 4
    assert next_trial(23, [verdict(23, True), verdict(24, True)], 256).seqs == 26
    assert next_trial(23, [verdict(23, True), verdict(24, True), verdict(26, True)], 256).seqs == 30
    assert next_trial(23, [verdict(24, True), verdict(30, False)], 256).seqs == 27  # then bisects


def test_an_answer_that_is_only_a_lower_bound_doubles_what_held() -> None:
    """Levels that never reached the SLO say only 'at least 23': climbing one cap a restart would take dozens."""
    up = next_trial(23, [verdict(23, True)], 96, lower_bound=True)
    assert up.seqs == 46 and up.why == "the levels only say at least 23, and 23 holds as measured: 46"
    assert next_trial(24, [verdict(23, True)], 96, lower_bound=True).seqs == 46  # not the law's 24: one more
    assert next_trial(60, [verdict(23, True)], 96, lower_bound=True).seqs == 60
    assert next_trial(23, [verdict(23, True), verdict(46, False)], 96, lower_bound=True).seqs == 34  # bisects


def test_no_answer_from_the_law_bisects_and_the_cap_bounds_the_search() -> None:
    assert next_trial(None, [verdict(10, True), verdict(30, False)], 256).seqs == 20
    assert next_trial(900, [], most_seqs=64).seqs == 64
    over = next_trial(900, [verdict(64, True)], most_seqs=64)
    assert over.seqs is None and over.why == "64 holds every SLO as measured and no larger cap is allowed"
    none = next_trial(5, [verdict(1, False)], 64)
    assert none.seqs is None and none.why == "no cap holds: even 1 fails" and none.verified is None


def test_a_budget_that_only_ttft_breaks_grows_at_the_same_cap() -> None:
    grown = next_trial(37, [verdict(37, False, budget=512, ttft=True, over=1.05)], 256)
    assert (grown.seqs, grown.budget) == (37, 768)  # just over: 1.5x
    far = next_trial(23, [verdict(23, False, budget=256, ttft=True, over=5.34)], 96)
    assert far.budget == 23 + 1556  # 233 tokens a step beside 23 decodes, x 5.34 / 0.8: one restart, not five
    assert far.why.startswith("only TTFT failed at budget 256 (5.3x its limit)")
    assert bracket([verdict(37, False, budget=512, ttft=True)]) == (None, None)  # not a failure of the cap
    assert bracket([verdict(37, False, budget=None)]) == (None, 37)


def test_only_ttft_and_e2e_failures_point_at_the_budget() -> None:
    assert ttft_only({"ttft_p95_ms": True, "tpot_p95_ms": False})
    assert not ttft_only({"ttft_p95_ms": True, "tpot_p95_ms": True})
    assert not ttft_only({"ttft_p95_ms": False})


def test_a_larger_cap_is_tried_with_the_budget_that_held_ttft_grown_with_it() -> None:
    """Issue 72: on a law where a prompt's prefill costs its steps (base 15, 0.5 a sequence, 0.008 a prompt
    token; prompts of 1,024), 24 held every SLO at budget 791 and the law then answered 54: tried at 791, TTFT
    failed at 3.5x its limit, and the budget grown after it broke TPOT: the search ran out of restarts. A cap
    twice as large finishes twice the requests a step, whose prompts the budget must carry."""
    seen = [
        TrialVerdict(seqs=22, budget=512, holds=True, ttft_held=True),
        TrialVerdict(seqs=24, budget=512, holds=False, ttft_only=True, ttft_over=1.26, ttft_held=False),
        TrialVerdict(seqs=24, budget=791, holds=True, ttft_held=True),
    ]
    step = next_trial(54, seen, 256)
    assert (step.seqs, step.budget) == (54, 54 + math.ceil((791 - 24) * 54 / 24)) and "grown with the cap" in step.why
    # silent without its cause: no TTFT SLO judged, or a smaller cap than the one that held
    plain = [TrialVerdict(seqs=24, budget=791, holds=True)]
    assert next_trial(54, plain, 256).budget == 791
    tpot_broke = [TrialVerdict(seqs=24, budget=791, holds=False, ttft_held=True)]  # a smaller cap: as it was
    assert next_trial(20, tpot_broke, 256).budget == 791
