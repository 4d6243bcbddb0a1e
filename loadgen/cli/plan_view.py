"""Terminal rendering of a capacity plan (rich renderables; rounding happens here)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from loadgen.cli.render import rich_report, rich_section
from planner import CapacityPlan, PlanOutcome
from planner.reports.decision import Decision, decide
from planner.reports.fleet_report import build_fleet_report
from planner.reports.plan_text import fmt, plan_lines, predicted_section, replay_section

EXPLAIN_HINT = "--explain: the levels, every law, the sizing simulation and the diagnosis"


def observations_table(plan: CapacityPlan) -> Table | None:
    """Each level on the batch axis, with its verdict (``planner.evidence.verdicts``: the sweep table's, the gate's)."""
    if plan.verdicts is None:
        return None
    obs = plan.verdicts.observations
    axis = {
        "server": "server's running batch",
        "littles_law": "Little's law: X*(E2E-TTFT), or tok/s x TPOT without E2E",
        "concurrency": "achieved concurrency",
    }[obs.batch_source]
    table = Table(title=f"levels (batch axis: {axis})", title_justify="left")
    for col in ("load", "conc", "batch", "TPOT p50", "TPOT p95", "TTFT p95", "tok/s", "in flight/c", "state"):
        table.add_column(col, justify="left" if col in ("load", "state") else "right")
    for lv, verdict in zip(obs.levels, plan.verdicts.levels):
        ratio = None if lv.littles_ratio is None else 1 / lv.littles_ratio
        mark = {"saturated": "[red]saturated[/]", "knee": "[yellow]knee[/]"}.get(verdict.state, verdict.state)
        if verdict.signals and verdict.state == "saturated":
            mark += f" ({len(verdict.signals)} signals)"
        if not verdict.trusted:
            mark += ", [yellow]untrusted[/]"
        table.add_row(
            lv.label,
            fmt(lv.concurrency),
            fmt(lv.batch),
            fmt(lv.tpot_p50_ms),
            fmt(lv.tpot_p95_ms),
            fmt(lv.ttft_p95_ms),
            fmt(lv.tokens_per_s, 0),
            fmt(ratio, 2),
            mark,
        )
    return table


def render_decision(decision: Decision) -> list[RenderableType]:
    """The decision first: each action and why, the evidence in one line, the caveats numbered."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for action in decision.actions:
        grid.add_row(action.do, action.why)
    parts: list[RenderableType] = [grid, Text(f"evidence: {decision.evidence}")]
    if decision.caveats:
        parts.append(Text("caveats, most serious first:", style="yellow"))
        numbered = Table.grid(padding=(0, 1))  # a caveat's continuation lines hang under its text, not at column 0
        numbered.add_column(justify="right", no_wrap=True)
        numbered.add_column()
        for i, caveat in enumerate(decision.caveats, 1):
            numbered.add_row(f"  {i}.", caveat)
        parts.append(numbered)
    return parts


def render_details(plan: CapacityPlan) -> list[RenderableType]:
    """What ``--explain`` adds below the decision: the levels, every law and count, the diagnosis."""
    parts: list[RenderableType] = [Text("\nhow the plan was obtained", style="bold underline")]
    table = observations_table(plan)
    if table is not None:
        parts.append(table)
    parts += [Text(line) for line in plan_lines(plan)]
    for finding in plan.findings:
        style = {"latency_breach": "bold red", "capacity_shortfall": "bold yellow"}.get(finding.kind, "green")
        parts.append(Text(f"diagnosis: {finding.message}", style=style))
    return parts


def render_outcome(outcome: PlanOutcome, notes: tuple[str, ...] = (), *, explain: bool = False) -> list[RenderableType]:
    """``loadgen plan``'s terminal output: the decision (or the fleet's report), the details with ``explain``,
    then the predicted levels and the validation where asked. ``notes``: the evidence's own caveats."""
    if outcome.fleet is not None:
        return [rich_report(build_fleet_report(outcome.fleet))]
    assert outcome.capacity is not None
    plan = outcome.capacity
    parts = render_decision(decide(plan, notes))
    parts += render_details(plan) if explain else [Text(EXPLAIN_HINT, style="dim")]
    if outcome.predicted is not None and plan.mix is not None:
        parts += rich_section(predicted_section(outcome.predicted, plan.mix))
    if outcome.checks:
        parts += rich_section(replay_section(outcome.checks, outcome.validated_law))
    return parts
