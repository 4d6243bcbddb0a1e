"""A plan's decision first, in the words of the action (pure).

What a capacity review acts on is a server flag and a replica count, so they lead: ``set
--max-num-seqs 37`` and why (the SLO that bounds it), ``run 11 replicas`` and what bounds that (an SLO
in the sizing simulation, or the utilisation target), the token budget where a mix plan recommends one;
then one line of evidence (the law, how many levels, how many trusted); then the caveats, each once,
most serious first. Everything else (the levels, every law, the simulation's replications, the
diagnosis's prose) stays behind ``--explain``. The terminal, Markdown and HTML all draw this one
``Decision``, so the three never say it differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner.capacity.batch_limit import BatchLimit
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.sizing import Estimate, SimOutcome
from planner.evidence.said_once import said_once
from planner.reports.document import Section, Table
from planner.reports.plan_text import batch_text, replicas_text, untrusted_basis

# a limit of these qualities is not a measured answer: said first among the caveats
WEAK_QUALITIES = ("extrapolated", "unresolved", "insufficient range", "lower bound", "unknown")
# findings about what runs now (--current-batch, --replicas): actions of their own ("slo_below_floor" is the
# batch action itself)
NOW_FINDINGS = ("latency_breach", "batch_headroom", "capacity_shortfall")


@dataclass(frozen=True, slots=True)
class Action:
    """One thing to do (``set --max-num-seqs 37``) and why, in a sentence."""

    do: str
    why: str


@dataclass(frozen=True, slots=True)
class Decision:
    """The plan's answer as a reader acts on it: actions, one line of evidence, ranked caveats."""

    actions: tuple[Action, ...]
    evidence: str
    caveats: tuple[str, ...]  # most serious first, each once

    def sections(self) -> tuple[Section, ...]:
        """The decision as report sections: the actions' table with the evidence, then the caveats."""
        table = Table(("do", "why"), tuple((a.do, a.why) for a in self.actions))
        out = [Section(title="Decision", paragraphs=(f"Evidence: {self.evidence}",), table=table)]
        if self.caveats:
            out.append(Section(title="Caveats, most serious first", bullets=self.caveats))
        return tuple(out)


def decide(plan: CapacityPlan, notes: Sequence[str] = ()) -> Decision:
    """The decision of ``plan``; ``notes`` are the evidence's own caveats (``report.caveats`` of its results)."""
    actions = [a for a in (_gone_action(plan), _batch_action(plan), _replica_action(plan), _budget_action(plan)) if a]
    actions += [Action("now", f.message) for f in plan.findings if f.kind in NOW_FINDINGS]
    return Decision(tuple(actions), _evidence(plan), ranked_caveats(plan, notes))


def _gone_action(plan: CapacityPlan) -> Action | None:
    """A server that stopped answering is the cause to name first: the lines below rest on what came before
    it (after a dead server the headline blamed the SLO, "no batch meets ... insufficient range", and the
    server was caveat 4 of 10)."""
    results = plan.observations.results if plan.observations is not None else ()
    gone = next((level for level in results if level.target_gone), None)
    if gone is None:
        return None
    return Action(
        "the server stopped answering",
        f"at {gone.load.label} (nothing answered for the last {gone.outage_s or 0:.1f} s): the sweep stopped there, "
        "and every line below rests on the levels before it; restart the server and sweep again before acting",
    )


def deciding_limit(plan: CapacityPlan) -> BatchLimit | None:
    """The SLO whose batch is the plan's (the smallest), or the first that no batch meets."""
    if plan.max_batch is None:
        return next((lim for lim in plan.limits if lim.batch is None and lim.quality != "any batch"), None)
    return min((lim for lim in plan.limits if lim.batch is not None), key=lambda lim: lim.batch or 0, default=None)


def _batch_action(plan: CapacityPlan) -> Action | None:
    """``set --max-num-seqs N``: the largest batch under the SLOs, and which SLO bounds it."""
    floor = next((f for f in plan.findings if f.kind == "slo_below_floor"), None)
    lim = deciding_limit(plan)
    if plan.max_batch is None:
        if floor is not None:
            return Action("no batch meets the SLO", floor.message)
        if lim is None:
            return _any_batch_action(plan)
        return Action("no batch meets the SLO", f"{lim.slo.key} <= {lim.slo.limit:g}: {lim.quality}" + _note(lim))
    flag = f"set --max-num-seqs {batch_text(plan.max_batch, plan.max_batch_lower_bound)}"
    kv = plan.mix.kv_batch if plan.mix is not None else None
    if kv is not None and kv == plan.max_batch and (lim is None or lim.batch is None or lim.batch > kv):
        return Action(flag, f"the KV cache holds no more ({plan.mix.kv_note if plan.mix else ''})")
    if lim is None:
        return Action(
            flag, f"no SLO bounds the batch: {plan.max_batch_method or 'the server cap'}{untrusted_evidence(plan)}"
        )
    how = _how_measured(plan, lim)
    if plan.max_batch_lower_bound:
        why = (
            f"{lim.slo.key} stayed under {lim.slo.limit:g} ms at every level swept, so the batch is at least this: "
            "sweep higher concurrency to find the largest"
        )
    else:
        why = f"the largest batch whose {lim.slo.key.removesuffix('_ms')} stays <= {lim.slo.limit:g} ms"
    return Action(flag, f"{why} ({how}){untrusted_evidence(plan)}")


def untrusted_evidence(plan: CapacityPlan) -> str:
    """The batch's action line's warning where ``untrusted_basis`` finds one, else empty."""
    basis = untrusted_basis(plan)
    if basis is None:
        return ""
    labels, causes, runner_only = basis
    if not runner_only:
        todo = "read the caveats before acting"
    elif causes == "too short a window":
        todo = "measure them again with a longer --duration before acting"
    else:
        todo = "measure them again on a quieter machine (or with --retries) before acting"
    return f"; UNTRUSTED: from {labels} ({causes}): {todo}"


def _any_batch_action(plan: CapacityPlan) -> Action | None:
    """Where every TPOT SLO is met at any batch (a flat law): say so, rather than nothing."""
    flat = [lim for lim in plan.limits if lim.quality == "any batch"]
    if not flat:
        return None
    keys = ", ".join(f"{lim.slo.key.removesuffix('_ms')} <= {lim.slo.limit:g} ms" for lim in flat)
    return Action(
        "any batch meets the SLO",
        f"{keys} at every batch: the step does not grow with the batch, so no SLO bounds --max-num-seqs (the "
        "server's KV cache and memory do)",
    )


def _how_measured(plan: CapacityPlan, lim: BatchLimit) -> str:
    """Measured beside modelled, or the law's alone for a what-if or a mix."""
    if plan.source == "law":
        return "the stated law, a what-if"
    if plan.source == "mix":
        return "predicted at a mix not measured"
    measured = "-" if lim.measured_batch is None else str(lim.measured_batch)
    model = "-" if lim.model_batch is None else str(lim.model_batch)
    return f"measured {measured}, model {model}"


def _note(lim: BatchLimit) -> str:
    return f" ({lim.note})" if lim.note else ""


def _replica_action(plan: CapacityPlan) -> Action | None:
    """``run N replicas`` for the load asked, and what bounds the count."""
    s = plan.sizing
    if s is None:
        return None
    load = f"{s.qps:,.4g} requests/s x {s.output_tokens:,.4g} output tokens ({s.needed_tokens_per_s:,.0f} tok/s)"
    n = plan.recommended_replicas
    if n is None:
        return Action("no replica count meets the SLOs", f"for {load}: {plan.replicas_method}")
    bounds = []
    sim, below = plan.simulated, plan.simulated_below
    if sim is not None and sim.replicas == n and below is not None:
        # one fewer that is overloaded outright fails no single SLO: the load itself bounds the count
        slos = " and ".join(f"{e.key.removesuffix('_ms')} <= {e.limit_ms:g} ms" for e in _failed(below)) or "capacity"
        bounds.append(
            f"{slos} in the sizing simulation ({_reads(sim, sim.estimates)}; {_reads(below, _failed(below))})"
        )
    if n == s.replicas_at_utilization:
        bounds.append(
            f"each replica at most {s.max_utilization:.0%} busy at {s.per_replica_tokens_per_s:,.0f} tok/s "
            f"({s.replicas_no_headroom} would run with no headroom)"
        )
    why = f"for {load}; bound by " + " and ".join(bounds)
    if sim is not None and sim.replicas != n:
        why += f" (the sizing simulation passes from {sim.replicas}: {_reads(sim, sim.estimates)})"
    if untrusted_evidence(plan):
        why += "; UNTRUSTED: sized on the batch above, from the same levels"
    return Action(f"run {replicas_text(n)}", why)


def _failed(outcome: SimOutcome) -> list[Estimate]:
    """The estimates that did not pass at a failing count (all of them where none is named)."""
    return [e for e in outcome.estimates if e.verdict != "pass"] or list(outcome.estimates)


def _reads(outcome: SimOutcome, estimates: Iterable[Estimate]) -> str:
    """``ttft_p95 187 ms (95% CI 46..328) at 11 replicas``, or that count's overload."""
    if outcome.verdict == "unstable":
        return f"{replicas_text(outcome.replicas)} overloaded (utilization {outcome.utilization:.2f})"
    values = ", ".join(
        f"{e.key.removesuffix('_ms')} {e.value_ms:,.0f} ms (95% CI {e.low_ms:,.0f}..{e.high_ms:,.0f})"
        for e in estimates
    )
    return f"{values} at {replicas_text(outcome.replicas)}"


def _budget_action(plan: CapacityPlan) -> Action | None:
    """A mix plan's recommended ``--max-num-batched-tokens``."""
    if plan.mix is None or plan.mix.budget is None:
        return None
    return Action(f"set --max-num-batched-tokens {plan.mix.budget}", plan.mix.budget_note)


def _evidence(plan: CapacityPlan) -> str:
    """One line: the law the plan rests on, and how much of the evidence is trusted."""
    m = plan.fit
    law = f"step {m.base_ms:.2f} + {m.per_seq_ms:.3f}*b ms" if m is not None else "no step law"
    if plan.source == "law":
        return f"the stated law, {law} (a what-if)"
    if plan.source == "mix" and plan.mix is not None:
        sweeps = len({p.group for p in plan.mix.model.points})
        return (
            f"PREDICTED for {plan.mix.mix.label} tokens, a mix not measured, from {sweeps} calibration sweeps "
            f"(law at the mix {law}); re-measure the mix before acting"
        )
    fitted = f"{law}, fitted on {m.n_levels} levels" if m is not None and m.n_levels else law
    r2 = f" (R^2 {m.r_squared:.3f})" if m is not None and m.r_squared is not None else ""
    if plan.verdicts is None:
        return fitted + r2
    n = len(plan.verdicts.levels)
    untrusted = [v.label for v in plan.verdicts.levels if not v.trusted]
    trust = f"{len(untrusted)} of {n} levels untrusted ({', '.join(untrusted)})" if untrusted else f"all {n} trusted"
    return f"{fitted}{r2}; {trust}"


def ranked_caveats(plan: CapacityPlan, notes: Sequence[str] = ()) -> tuple[str, ...]:
    """Every caveat once, the serious first: answers that are not measured (a limit extrapolated or a lower
    bound, untrusted levels), then the plan's own warnings, then what the evidence says of itself. The same
    sentence for several levels is said once, naming them."""
    verdicts = plan.verdicts.levels if plan.verdicts is not None else ()
    service = [p for v in verdicts for p in v.service]  # the server's own failures: the cause, first
    untrusted = [p for v in verdicts for p in v.problems if p not in v.service]
    own = said_once([*service, *weak_limits(plan), *untrusted, *plan.warnings])
    # the evidence's notes judge the same levels: a line they merged alike is one the plan merged, said already
    return tuple(said_once([*own, *(note for note in notes if note not in own)]))


def weak_limits(plan: CapacityPlan) -> list[str]:
    """Each SLO's batch that is not a measured answer (extrapolated, a lower bound, unresolved), said so."""
    return [f"{lim.slo.key}: {lim.quality}{_note(lim)}" for lim in plan.limits if lim.quality in WEAK_QUALITIES]
