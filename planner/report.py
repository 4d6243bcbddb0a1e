"""One ``Report`` value, rendered three ways: Markdown, self-contained HTML, and (by the CLI) rich.

Rounding happens here and only here. The report states the tool version,
the profile, the target (never credentials), the date, and the metric
definitions; it says out loud what the numbers do not: client-bound levels,
estimated token counts, extrapolated answers, incomplete runs.
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.results import LevelResult, Metric, Results, SloTarget
from planner.plan import CapacityPlan
from planner.plots import Plot

DEFINITIONS = (
    "TTFT is the time from when a request was due (its scheduled arrival, or the moment its client became free) "
    "to the first chunk carrying output text, so client-side queueing counts; TPOT is a request's mean gap "
    "between output tokens, (t_last - t_first) / (tokens - 1); ITL is every gap between consecutive chunks, "
    "pooled; E2E runs from due time to the end of the stream. Percentiles come from HdrHistograms (3 significant "
    "digits). Throughput counts output tokens that arrived inside the measured window (warm-up and drain "
    "excluded); failed requests count in the error rate and stay out of the latencies."
)


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    paragraphs: tuple[str, ...] = ()
    table: Table | None = None
    bullets: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Report:
    title: str
    meta: tuple[tuple[str, str], ...]
    sections: tuple[Section, ...]
    plots: tuple[Plot, ...] = ()


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table cell; "-" when there is no data (never a silent 0)."""
    return "-" if value is None else f"{value:,.{digits}f}"


def plan_lines(plan: CapacityPlan) -> list[str]:
    """The plan's answer in a few lines (terminal, report, and the end of a sweep)."""
    lines = []
    if plan.fit is not None:
        f = plan.fit
        law = f"step_ms(b) = {f.base_ms:.2f} + {f.per_seq_ms:.3f}*b"
        if plan.source == "sweep":
            ci = f" (slope 95% CI {f.per_seq_ci_ms[0]:.3f}..{f.per_seq_ci_ms[1]:.3f})" if f.per_seq_ci_ms else ""
            law += (f", fitted on TPOT p50 over b = {f.fitted_batch_range[0]:.1f}..{f.fitted_batch_range[1]:.1f} "
                    f"({f.n_levels} levels){ci}")
        lines.append(f"law: {law}")
    if plan.saturation is not None and plan.saturation.max_batch is not None:
        lines.append(f"saturation: effective max batch B ~ {plan.saturation.max_batch:.1f} "
                     f"(signals: {', '.join(plan.saturation.agreed)})")
    for lim in plan.limits:
        parts = [f"{lim.slo.key} <= {lim.slo.limit:g}: max batch {lim.batch if lim.batch is not None else 'none'}"]
        if lim.measured_batch is not None or lim.model_batch is not None:
            measured = lim.measured_batch if lim.measured_batch is not None else "-"
            model = lim.model_batch if lim.model_batch is not None else "-"
            parts.append(f"(measured {measured}, model {model})")
        parts.append(f"[{lim.quality}]")
        if lim.more_requests:
            parts.append(f"~{lim.more_requests} more requests per level would resolve it")
        lines.append(" ".join(parts) + (f"; {lim.note}" if lim.note else ""))
    if plan.max_batch is not None and plan.step_ms_at_max_batch is not None:
        lines.append(f"at batch {plan.max_batch}: step {plan.step_ms_at_max_batch:.1f} ms, "
                     f"{fmt(plan.tokens_per_s_per_replica)} tok/s per replica, "
                     f"{fmt(plan.tokens_per_s_per_user)} tok/s per user")
    if plan.sizing is not None:
        s = plan.sizing
        text = (f"replicas for {s.needed_tokens_per_s:,.0f} tok/s: {s.replicas_no_headroom} with no headroom "
                f"(utilization {s.utilization_no_headroom:.2f}), {s.replicas_at_utilization} at "
                f"utilization <= {s.max_utilization:g}")
        if plan.simulated is not None:
            text += f"; simulated: {plan.simulated.replicas} pass (TTFT p95 {plan.simulated.ttft_p95_ms:,.0f} ms)"
            if plan.simulated_below is not None:
                text += f", {plan.simulated_below.replicas} fail (TTFT p95 {plan.simulated_below.ttft_p95_ms:,.0f} ms)"
        lines.append(text)
        lines.append(f"recommended: {plan.recommended_replicas} replicas ({plan.replicas_method})")
    if plan.batching is not None:
        b = plan.batching
        lines.append(f"static batching: {b.useful_slot_steps} useful of {b.static_slot_steps} slot-steps "
                     f"({b.static:.1%}); continuous: {b.continuous:.0%} of occupied slot-steps")
    return lines


def level_rows(results: Results, plan: CapacityPlan | None) -> Table:
    states = dict(zip([lv.label for lv in plan.observations.levels], plan.saturation.states)) \
        if plan and plan.observations and plan.saturation else {}
    rows = []
    for lv in results.levels:
        flags = [states.get(lv.load.label, "")] if states.get(lv.load.label, "unsaturated") != "unsaturated" else []
        if lv.client_bound:
            flags.append("client-bound")
        if lv.tokens_estimated:
            flags.append("tokens estimated")
        if not lv.complete:
            flags.append("interrupted")
        rate = lv.error_rate
        rows.append((
            lv.load.label, fmt(lv.achieved_concurrency), fmt(lv.percentile_ms(Metric.TTFT, 50)),
            fmt(lv.percentile_ms(Metric.TTFT, 95)), fmt(lv.percentile_ms(Metric.TPOT, 50)),
            fmt(lv.percentile_ms(Metric.TPOT, 95)), fmt(lv.percentile_ms(Metric.ITL, 99)),
            fmt(lv.output_tokens_per_s, 0), fmt(lv.requests_per_s, 2), "-" if rate is None else f"{rate:.2%}",
            ", ".join(flags) or "ok",
        ))
    return Table(("load", "conc", "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms", "TPOT p95 ms", "ITL p99 ms", "tok/s",
                  "req/s", "errors", "flags"), tuple(rows))


def slo_verdicts(results: Results, slos: Sequence[SloTarget]) -> Table | None:
    if not slos:
        return None
    rows = []
    for lv in results.levels:
        cells = [lv.load.label]
        for slo in slos:
            value, ok = slo.value(lv), slo.met_by(lv)
            shown = "-" if value is None else (f"{value:.2%}" if slo.metric is None else f"{value:,.1f} ms")
            cells.append(f"{'pass' if ok else 'FAIL' if ok is False else 'no data'} ({shown})")
        rows.append(tuple(cells))
    return Table(("load", *[f"{s.key} <= {s.limit:g}" for s in slos]), tuple(rows))


def caveats(results: Results, plan: CapacityPlan | None = None) -> tuple[str, ...]:
    """Things the numbers do not say by themselves (terminal notes and the report's Caveats)."""
    out = list(results.notes)
    for lv in results.levels:
        if lv.client_bound:
            out.append(f"{lv.load.label} is client-bound (generator lag p99 > {lv.lag_threshold_ms:g} ms, or its CPU "
                       "saturated): its latencies measure the load generator, not the server; try --workers")
        if lv.tokens_estimated:
            out.append(f"{lv.load.label}: output tokens were counted from chunks (no usage from the server)")
        if lv.failed:
            kinds = ", ".join(f"{k.value} {n}" for k, n in sorted(lv.errors.items()))
            out.append(f"{lv.load.label}: {lv.failed} failed requests ({kinds})")
        if not lv.complete:
            out.append(f"{lv.load.label}: interrupted; partial level")
    if not results.complete:
        out.append("the run is incomplete: it was interrupted, the levels shown are the ones that finished")
    if plan is not None:
        out += [f"{lim.slo.key}: {lim.quality}" + (f" ({lim.note})" if lim.note else "")
                for lim in plan.limits if lim.quality in ("extrapolated", "unresolved", "insufficient range")]
        out += list(plan.warnings)
    return tuple(dict.fromkeys(out))


def build_report(results: Results, plan: CapacityPlan | None, slos: Sequence[SloTarget],
                 plots: tuple[Plot, ...] = ()) -> Report:
    profile = (results.settings.get("profile") or {}).get("name", "-")
    meta = (
        ("tool", f"loadgen {results.run.tool_version}"),
        ("date", results.run.started_at),
        ("target", f"{results.target.base_url} ({results.target.api} API)"),
        ("model", results.target.model),
        ("profile", str(profile)),
        ("run", f"{results.run.command} {results.run.id}, {len(results.levels)} level(s), "
                f"{'complete' if results.complete else 'INCOMPLETE'}"),
    )
    sections = [Section("Levels", table=level_rows(results, plan))]
    verdicts = slo_verdicts(results, slos)
    if verdicts is not None:
        sections.append(Section("SLO verdicts", table=verdicts))
    if plan is not None:
        sections.append(Section("Capacity plan", bullets=tuple(plan_lines(plan))))
        sections.append(Section("Diagnosis", bullets=tuple(f.message for f in plan.findings)))
    notes = caveats(results, plan)
    if notes:
        sections.append(Section("Caveats", bullets=notes))
    sections.append(Section("Metric definitions", paragraphs=(DEFINITIONS,)))
    title = f"Capacity report: {results.target.model}"
    return Report(title, meta, tuple(sections), plots)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Report) -> str:
    out = [f"# {report.title}", ""]
    out += [f"- **{k}**: {_md_cell(v)}" for k, v in report.meta]
    for section in report.sections:
        out += ["", f"## {section.title}", ""]
        out += [p + "\n" for p in section.paragraphs]
        if section.table is not None:
            t = section.table
            out.append("| " + " | ".join(_md_cell(c) for c in t.columns) + " |")
            out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(t.columns))) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
        out += [f"- {_md_cell(b)}" for b in section.bullets]
    return "\n".join(out).rstrip() + "\n"


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:72rem;color:#222;
padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}th,td{border:1px solid #ddd;padding:.25rem .5rem;
text-align:right}th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}
td.fail{color:#b00020;font-weight:600}dl.meta{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem}
dt{font-weight:600}.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(30rem,1fr));gap:1rem}
figure{margin:0}figure img{max-width:100%}figcaption{font-size:.8rem;color:#555}
"""


FAIL_TD = '<td class="fail">'


def to_html(report: Report) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">", f"<title>{e(report.title)}</title>",
           f"<style>{CSS}</style></head><body>", f"<h1>{e(report.title)}</h1>", "<dl class=\"meta\">"]
    out += [f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in report.meta]
    out.append("</dl>")
    for section in report.sections:
        out.append(f"<h2>{e(section.title)}</h2>")
        out += [f"<p>{e(p)}</p>" for p in section.paragraphs]
        if section.table is not None:
            out.append("<table><thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in section.table.columns)
                       + "</tr></thead><tbody>")
            for row in section.table.rows:
                cells = "".join((FAIL_TD if c.startswith("FAIL") else "<td>") + f"{e(c)}</td>" for c in row)
                out.append(f"<tr>{cells}</tr>")
            out.append("</tbody></table>")
        if section.bullets:
            out.append("<ul>" + "".join(f"<li>{e(b)}</li>" for b in section.bullets) + "</ul>")
    if report.plots:
        out.append("<h2>Plots</h2><div class=\"plots\">")
        for plot in report.plots:
            out.append(f"<figure id=\"{e(plot.name)}\"><img alt=\"{e(plot.caption)}\" src=\"{plot.data_uri}\">"
                       f"<figcaption>{e(plot.caption)}</figcaption></figure>")
        out.append("</div>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


CSV_COLUMNS = ("load_kind", "load_value", "window_s", "completed", "failed", "error_rate", "achieved_concurrency",
               "output_tokens_per_s", "requests_per_s", "prompt_tokens_mean", "output_tokens_mean", "tokens_estimated",
               "client_bound", "goodput_ratio")


def to_csv(results: Results) -> str:
    """One row per level with the summary columns (latencies in ms)."""
    latency_cols = [f"{m.value}_{s}_ms" for m in Metric for s in ("mean", "p50", "p90", "p95", "p99", "max")]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *latency_cols])
    for lv in results.levels:
        writer.writerow(_csv_row(lv))
    return buf.getvalue()


def _csv_row(lv: LevelResult) -> list[object]:
    s = lv.summary()
    row: list[object] = [lv.load.kind, lv.load.value, round(lv.window_s, 3), lv.completed, lv.failed,
                         lv.error_rate, s["achieved_concurrency"], s["output_tokens_per_s"], s["requests_per_s"],
                         s["prompt_tokens_mean"], s["output_tokens_mean"], lv.tokens_estimated, lv.client_bound,
                         lv.goodput_ratio]
    for m in Metric:
        stats = s[f"{m.value}_ms"]
        row += [stats[k] for k in ("mean", "p50", "p90", "p95", "p99", "max")]
    return ["" if v is None else v for v in row]
