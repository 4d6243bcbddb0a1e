"""Terminal rendering of a capacity plan (rich renderables; rounding happens here)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from planner import CapacityPlan


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def observations_table(plan: CapacityPlan) -> Table | None:
    obs, sat = plan.observations, plan.saturation
    if obs is None or sat is None:
        return None
    axis = {"server": "server's running batch", "littles_law": "Little's law X*(E2E-TTFT)",
            "concurrency": "achieved concurrency"}[obs.batch_source]
    table = Table(title=f"levels (batch axis: {axis})", title_justify="left")
    for col in ("load", "conc", "batch", "TPOT p50", "TPOT p95", "TTFT p95", "tok/s", "X*E2E/c", "state"):
        table.add_column(col, justify="left" if col in ("load", "state") else "right")
    for lv, state, signals in zip(obs.levels, sat.states, sat.signals):
        ratio = None if lv.littles_ratio is None else 1 / lv.littles_ratio
        mark = {"saturated": "[red]saturated[/]", "knee": "[yellow]knee[/]"}.get(state, "ok")
        if signals and state == "saturated":
            mark += f" ({len(signals)} signals)"
        table.add_row(lv.label, _f(lv.concurrency), _f(lv.batch), _f(lv.tpot_p50_ms), _f(lv.tpot_p95_ms),
                      _f(lv.ttft_p95_ms), _f(lv.tokens_per_s, 0), _f(ratio, 2), mark)
    return table


def headline(plan: CapacityPlan) -> list[str]:
    """The answer in a few lines (also printed at the end of a sweep)."""
    lines = []
    if plan.fit is not None:
        f = plan.fit
        law = f"step_ms(b) = {f.base_ms:.2f} + {f.per_seq_ms:.3f}*b"
        if plan.source == "sweep":
            ci = (f" (slope 95% CI {f.per_seq_ci_ms[0]:.3f}..{f.per_seq_ci_ms[1]:.3f})"
                  if f.per_seq_ci_ms else "")
            law += f", fitted on TPOT p50 over b = {f.fitted_batch_range[0]:.1f}..{f.fitted_batch_range[1]:.1f} " \
                   f"({f.n_levels} levels){ci}"
        lines.append(f"law: {law}")
    if plan.saturation is not None and plan.saturation.max_batch is not None:
        lines.append(f"saturation: effective max batch B ~ {plan.saturation.max_batch:.1f} "
                     f"(signals: {', '.join(plan.saturation.agreed)})")
    for lim in plan.limits:
        parts = [f"{lim.slo.key} <= {lim.slo.limit:g}: max batch {lim.batch if lim.batch is not None else 'none'}"]
        if lim.measured_batch is not None or lim.model_batch is not None:
            parts.append(f"(measured {lim.measured_batch if lim.measured_batch is not None else '-'}, "
                         f"model {lim.model_batch if lim.model_batch is not None else '-'})")
        parts.append(f"[{lim.quality}]")
        if lim.more_requests:
            parts.append(f"~{lim.more_requests} more requests per level would resolve it")
        lines.append(" ".join(parts) + (f"; {lim.note}" if lim.note else ""))
    if plan.max_batch is not None and plan.step_ms_at_max_batch is not None:
        lines.append(
            f"at batch {plan.max_batch}: step {plan.step_ms_at_max_batch:.1f} ms, "
            f"{_f(plan.tokens_per_s_per_replica)} tok/s per replica, {_f(plan.tokens_per_s_per_user)} tok/s per user"
        )
    if plan.sizing is not None:
        s = plan.sizing
        text = (f"replicas for {s.needed_tokens_per_s:,.0f} tok/s: {s.replicas_no_headroom} with no headroom "
                f"(utilization {s.utilization_no_headroom:.2f}), {s.replicas_at_utilization} at "
                f"utilization <= {s.max_utilization:g}")
        if plan.simulated is not None:
            text += f"; simulated: {plan.simulated.replicas} pass (TTFT p95 {plan.simulated.ttft_p95_ms:,.0f} ms)"
            if plan.simulated_below is not None:
                text += (f", {plan.simulated_below.replicas} fail "
                         f"(TTFT p95 {plan.simulated_below.ttft_p95_ms:,.0f} ms)")
        lines.append(text)
        lines.append(f"recommended: {plan.recommended_replicas} replicas ({plan.replicas_method})")
    if plan.batching is not None:
        b = plan.batching
        lines.append(f"static batching: {b.useful_slot_steps} useful of {b.static_slot_steps} slot-steps "
                     f"({b.static:.1%}); continuous: {b.continuous:.0%} of occupied slot-steps")
    return lines


def render_plan(plan: CapacityPlan) -> RenderableType:
    parts: list[RenderableType] = []
    table = observations_table(plan)
    if table is not None:
        parts.append(table)
    parts += [Text(line) for line in headline(plan)]
    for finding in plan.findings:
        style = {"latency_breach": "bold red", "capacity_shortfall": "bold yellow"}.get(finding.kind, "green")
        parts.append(Text(f"diagnosis: {finding.message}", style=style))
    parts += [Text(f"warning: {w}", style="yellow") for w in plan.warnings]
    return Group(*parts)
