"""Terminal rendering of a capacity plan (rich renderables; rounding happens here)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from planner import CapacityPlan
from planner.reports.report import fmt, plan_lines


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
