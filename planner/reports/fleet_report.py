"""The fleet plan as report sections: the answer, the variants, replicas over time, the assumptions (pure).

``loadgen plan --variant`` prints this report in the terminal; ``loadgen report --variant``
writes it as Markdown or HTML (with ``planner.reports.plots.fleet_over_time``).
"""

from __future__ import annotations

import numpy as np

from planner.evidence.said_once import said_once
from planner.fleet.demand import ONE_HOUR_S
from planner.fleet.fleet_plan import Fleet, FleetPlan
from planner.reports.document import Plot, Report, Section, Table

MAX_BUCKET_ROWS = 96  # a day of quarter-hours; longer demand is in --json and the plot


def money(plan: FleetPlan, value: float) -> str:
    return f"${value:,.2f}" if plan.objective == "USD" else f"{value:,.2f} GPU-h"


def fleet_answer(plan: FleetPlan) -> str:
    """The answer in one sentence."""
    chosen, runner = plan.chosen, plan.runner_up
    if chosen is None:
        return "No variant meets the SLOs at any size: " + "; ".join(
            f"{c.name}: {c.how}" for c in plan.capacities if c.mu_rps is None
        )
    if not chosen.held:
        return (
            f"No fleet held every SLO in every bucket after {chosen.rounds} replay rounds; the closest is "
            f"{chosen.name} ({money(plan, chosen.objective)})"
        )
    replicas = chosen.replicas()
    count = f"{min(replicas)}" if min(replicas) == max(replicas) else f"{min(replicas)} to {max(replicas)}"
    text = (
        f"Run {chosen.name}: {count} replicas over the period, "
        f"{money(plan, chosen.objective)} ({chosen.gpu_hours:,.2f} GPU-hours) with a perfect autoscaler"
    )
    if runner is not None:
        margin = (runner.objective - chosen.objective) / chosen.objective if chosen.objective else 0.0
        text += f"; the runner-up, {runner.name}, costs {money(plan, runner.objective)} ({margin:+.1%})"
    return text + "."


def variants_table(plan: FleetPlan) -> Table:
    fleets = {f.name: f for f in plan.fleets}
    rows = []
    for cap in plan.capacities:
        fleet = fleets.get(cap.name)
        price = f"{cap.variant.cost_per_gpu_hour:g}" if cap.variant.cost_per_gpu_hour is not None else "-"
        base = (cap.name, str(cap.variant.gpus), price, str(cap.batch or "-"))
        if fleet is None or cap.mu_rps is None:
            rows.append((*base, "-", "-", "-", "-", "-", f"FAIL: {cap.how}"))
            continue
        rows.append((*base, f"{float(cap.mu_rps):.3g}", *_fleet_cells(plan, fleet), cap.how))
    for fleet in plan.fleets:
        if len(fleet.kinds) > 1:
            rows.append(
                (
                    fleet.name,
                    "-",
                    "-",
                    "-",
                    "-",
                    *_fleet_cells(plan, fleet),
                    "the counts of each that cost least over the day",
                )
            )
    return Table(
        (
            "variant",
            "GPUs",
            "USD/GPU-h",
            "batch",
            "mu_slo req/s",
            "replicas peak/mean",
            "GPU-hours",
            plan.objective,
            f"static {plan.objective}",
            "how",
        ),
        tuple(rows),
    )


def _fleet_cells(plan: FleetPlan, fleet: Fleet) -> tuple[str, str, str, str]:
    replicas = fleet.replicas()
    cost = money(plan, fleet.objective) if fleet.held else f"FAIL: {money(plan, fleet.objective)}, SLO broken"
    return (
        f"{max(replicas)} / {np.mean(replicas):.2f}",
        f"{fleet.gpu_hours:,.2f}",
        cost,
        money(plan, fleet.static_objective),
    )


def fleet_columns(fleet: Fleet) -> list[tuple[str, tuple[int, ...]]]:
    """Replicas paid for per bucket, one series per variant: a mix's two GPU types are never added up."""
    if len(fleet.kinds) == 1:
        return [(fleet.name, fleet.replicas())]
    return [
        (f"{fleet.name}: {kind.name}", tuple(int(v) for v in counts))
        for kind, counts in zip(fleet.kinds, fleet.provisioned, strict=True)
    ]


def clock_text(seconds: float) -> str:
    """A bucket's start as a time of day past the period's start: ``07:30``, ``31:00`` on a second day."""
    minutes = round(seconds / 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def over_time_table(plan: FleetPlan) -> Table | None:
    """Demand and replicas per bucket, a column per variant of each fleet (None: too many buckets for a table)."""
    if len(plan.demand.rates) > MAX_BUCKET_ROWS:
        return None
    series = [column for fleet in plan.fleets for column in fleet_columns(fleet)]
    bucket = plan.demand.bucket_s
    clock = bucket % 60 == 0  # whole minutes read as a time of day; shorter buckets keep their seconds
    columns = [f"bucket start ({'h:mm' if clock else 's'})", "demand req/s", *(name for name, _ in series)]
    rows = []
    for k, rate in enumerate(plan.demand.rates):
        start = clock_text(k * bucket) if clock else f"{k * bucket:g}"
        rows.append((start, f"{rate:.3g}", *(str(counts[k]) for _, counts in series)))
    return Table(tuple(columns), tuple(rows))


def assumptions(plan: FleetPlan) -> list[str]:
    d = plan.demand
    out = [
        f"demand: {d.source}; {len(d.rates)} bucket(s) of {d.bucket_s:g} s, peak {d.peak_rps:.3g} and mean "
        f"{d.mean_rps:.3g} requests/s",
        "replicas(t) = ceil(demand / mu_slo) per bucket: a perfect autoscaler, the lower bound; mu_slo is the smaller "
        f"of the utilization target {plan.max_utilization:g} and the simulated largest rate under the TTFT/E2E SLOs, "
        "each TTFT/E2E with what the variant's sweep measured beyond its engine",
        f"checked by replaying {plan.arrivals} on each fleet, requests routed at random in proportion to each "
        "replica's capacity, each request with its variant's TTFT beyond the engine; a bucket that broke an SLO got "
        "one more replica until every bucket held",
    ]
    chosen = plan.chosen
    if chosen is not None:
        added = chosen.added
        out.append(
            f"the replay added {added} replica-bucket(s) to {chosen.name}'s lower bound"
            if added
            else f"the replay held {chosen.name}'s lower bound in every bucket"
        )
        if plan.scale_up_s:
            out.append(
                f"scale-up lag {plan.scale_up_s:g} s: a replica is started that long before the bucket that needs "
                f"it; the lag costs {money(plan, chosen.lag_objective)} for {chosen.name}"
            )
        if plan.spare:
            out.append(
                f"{plan.spare} spare replica(s) in every bucket, never counted on for the SLOs: "
                f"{money(plan, chosen.spare_objective)} for {chosen.name}"
            )
        out.append(
            f"a static fleet of the peak all the time would cost {money(plan, chosen.static_objective)} "
            f"({chosen.static_gpu_hours:,.2f} GPU-hours)"
        )
    if plan.single_kind_pairs:
        out.append(f"mixes not listed, no cheaper than one of their kinds alone: {', '.join(plan.single_kind_pairs)}")
    if plan.objective == "GPU-hours":
        out.append("no prices given (cost=): the variants are compared on GPU-hours")
    out.append(f"the period is {d.period_s / ONE_HOUR_S:.3g} h; costs are for the period")
    return out


def caveats(plan: FleetPlan) -> list[str]:
    """Each variant's own plan warnings, named (the fleet rests on each of them); one said of several variants
    is said once, naming them all."""
    named: dict[str, list[str]] = {}
    for c in plan.capacities:
        for warning in said_once(c.variant.plan.warnings):
            names = named.setdefault(warning, [])
            if c.name not in names:
                names.append(c.name)
    return [f"{', '.join(names)}: {warning}" for warning, names in named.items()]


def fleet_sections(plan: FleetPlan) -> list[Section]:
    sections = [Section(title="Fleet plan", table=variants_table(plan))]  # the answer is the report's headline
    table = over_time_table(plan)
    if table is not None:
        sections.append(Section(title="Replicas over time", table=table))
    sections.append(Section(title="Assumptions", bullets=tuple(assumptions(plan))))
    if notes := caveats(plan):
        sections.append(Section(title="Caveats", bullets=tuple(notes)))
    return sections


def build_fleet_report(plan: FleetPlan, plots: tuple[Plot, ...] = ()) -> Report:
    slos = ", ".join(f"{s.key} < {s.limit:g}" for s in plan.slos) or "none"
    meta = (*((c.name, f"{c.variant.source}, batch {c.batch or '-'}") for c in plan.capacities), ("SLOs", slos))
    return Report(
        title="Fleet capacity plan",
        headline=fleet_answer(plan),
        meta=meta,
        sections=tuple(fleet_sections(plan)),
        plots=plots,
        lead=1,  # the variants' table answers; the replicas over the day are drawn right below it
    )
