"""Terminal rendering of a capacity plan (rich renderables; rounding happens here)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from loadgen.cli.render import rich_report, rich_section
from planner import CapacityPlan, PlanOutcome
from planner.reports.fleet_report import build_fleet_report
from planner.reports.plan_text import fmt, plan_lines, predicted_section, replay_section


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
    for col in ("load", "conc", "batch", "TPOT p50", "TPOT p95", "TTFT p95", "tok/s", "X*E2E/c", "state"):
        table.add_column(col, justify="left" if col in ("load", "state") else "right")
    for lv, verdict in zip(obs.levels, plan.verdicts.levels):
        ratio = None if lv.littles_ratio is None else 1 / lv.littles_ratio
        mark = {"saturated": "[red]saturated[/]", "knee": "[yellow]knee[/]"}.get(verdict.state, "ok")
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


def render_plan(plan: CapacityPlan) -> RenderableType:
    parts: list[RenderableType] = []
    table = observations_table(plan)
    if table is not None:
        parts.append(table)
    parts += [Text(line) for line in plan_lines(plan)]
    for finding in plan.findings:
        style = {"latency_breach": "bold red", "capacity_shortfall": "bold yellow"}.get(finding.kind, "green")
        parts.append(Text(f"diagnosis: {finding.message}", style=style))
    parts += [Text(f"warning: {w}", style="yellow") for w in plan.warnings]
    return Group(*parts)


def render_outcome(outcome: PlanOutcome) -> list[RenderableType]:
    """``loadgen plan``'s terminal output: the plan (or the fleet's report), then the predicted levels and the
    validation where asked."""
    if outcome.fleet is not None:
        return [rich_report(build_fleet_report(outcome.fleet))]
    assert outcome.capacity is not None
    parts = [render_plan(outcome.capacity)]
    if outcome.predicted is not None and outcome.capacity.mix is not None:
        parts += rich_section(predicted_section(outcome.predicted, outcome.capacity.mix))
    if outcome.checks:
        parts += rich_section(replay_section(outcome.checks, outcome.validated_law))
    return parts
