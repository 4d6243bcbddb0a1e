"""Terminal tables for results (rich renderables; rounding happens here, at display time)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results
from loadgen.slo_target import SloTarget
from planner.evidence.verdicts import Verdicts
from planner.reports.document import Report, Section
from planner.reports.plan_text import fmt
from planner.reports.report import POOLED_CELLS, goodput_rule

LATENCY_ROWS = (
    (Metric.TTFT, "TTFT (from intended)"),
    (Metric.TTFT_SENT, "TTFT (from sent)"),
    (Metric.TPOT, "TPOT"),
    (Metric.ITL, "ITL"),
    (Metric.E2E, "E2E latency"),
    (Metric.QUEUE, "slot queue"),
    (Metric.LAG, "generator lag"),
)
STREAM_METRICS = (Metric.TTFT, Metric.TTFT_SENT, Metric.TPOT, Metric.ITL)  # what only a token stream times


def rich_section(section: Section) -> list[RenderableType]:
    """One report section for the terminal: its title, paragraphs, table (a FAIL cell in red) and bullets."""
    parts: list[RenderableType] = [Text(f"\n{section.title}", style="bold underline")]
    parts += [Text(p) for p in section.paragraphs]
    if section.table is not None:
        table = Table(*section.table.columns)
        for row in section.table.rows:
            table.add_row(*[f"[red]{c}[/]" if c.startswith("FAIL") else c for c in row])
        parts.append(table)
    return parts + [Text(f"- {b}") for b in section.bullets]


def rich_report(report: Report) -> RenderableType:
    """The headline, the decision, the run's particulars, then the evidence (the order of every renderer)."""
    parts: list[RenderableType] = [Text(report.title, style="bold"), Text(report.headline)]
    for section in report.sections[: report.lead]:
        parts += rich_section(section)
    parts += [Text(f"{k}: {v}") for k, v in report.meta]
    for section in report.body:
        parts += rich_section(section)
    return Group(*parts)


def level_table(level: LevelResult) -> Table:
    """Latency distribution of one level, in milliseconds."""
    table = Table(title=f"{level.load.label}: latency (ms)", title_justify="left")
    table.add_column("metric")
    for col in ("mean", "p50", "p90", "p95", "p99", "max", "count"):
        table.add_column(col, justify="right")
    summary = level.summary()
    # a pooling level has no token stream: its E2E is the request's latency, and nothing else is timed
    untimed = (Metric.QUEUE, *STREAM_METRICS) if level.pooling else (Metric.QUEUE,)
    for metric, name in LATENCY_ROWS:
        s = summary[f"{metric.value}_ms"]
        if s["count"] == 0 and metric in untimed:
            continue
        name = "request latency" if metric == Metric.E2E and level.pooling else name
        table.add_row(name, *(fmt(s[k]) for k in ("mean", "p50", "p90", "p95", "p99", "max")), str(s["count"]))
    return table


def throughput_table(level: LevelResult) -> Table:
    table = Table(title=f"{level.load.label}: throughput", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    s = level.summary()
    rate = level.error_rate
    rows = [
        ("measured window", f"{level.window_s:.1f} s"),
        (
            "completed / failed",
            f"{level.completed} / {level.failed}" + (f" (+{level.cut} cut in flight at the end)" if level.cut else ""),
        ),
        ("error rate", "-" if rate is None else f"{rate:.2%}"),
        ("inputs/s (prompt tokens/s)", f"{fmt(s['inputs_per_s'])} ({fmt(s['prompt_tokens_per_s'])})")
        if level.pooling
        else ("output tokens/s", fmt(s["output_tokens_per_s"])),
        # a closed loop offers what it is served: its sends are not a load asked for
        ("requests/s served / offered", f"{fmt(s['requests_per_s'], 2)} / {fmt(s['offered_per_s'], 2)}")
        if level.load.kind == "rate"
        else ("requests/s served", fmt(s["requests_per_s"], 2)),
        ("achieved concurrency", fmt(s["achieved_concurrency"], 2)),
        (
            "inputs a request / prompt tokens an input",
            f"{fmt(s['inputs_per_request'])} / {fmt(s['prompt_tokens_mean'])}",
        )
        if level.pooling
        else ("prompt / output tokens (mean)", f"{fmt(s['prompt_tokens_mean'])} / {fmt(s['output_tokens_mean'])}"),
    ]
    if "by_turn" in s:
        for metric in ("ttft", "tpot"):
            turns = ", ".join(f"{t}: {fmt(v[f'{metric}_ms']['p50'])}" for t, v in s["by_turn"].items())
            rows.append((f"{metric.upper()} p50 by turn (ms)", turns))
    if level.errors:
        rows.append(("errors by kind", ", ".join(f"{k.value}={v}" for k, v in sorted(level.errors.items()))))
    if level.server is not None:
        rows.append(
            (
                f"server batch ({level.server.source})",
                f"running {fmt(level.server.running_mean)}, waiting {fmt(level.server.waiting_mean)}",
            )
        )
        prompt_rate, generation_rate = (
            level.server.per_s(t) for t in (level.server.prompt_tokens, level.server.generation_tokens)
        )
        if prompt_rate is not None or generation_rate is not None:
            rows.append(("server tokens/s (prompt / generated)", f"{fmt(prompt_rate)} / {fmt(generation_rate)}"))
        server = level.server
        outside = server.outside_engine_ms(level.mean_ms(Metric.TTFT_SENT))
        if outside is not None:
            rows.append(
                (
                    "TTFT mean, where (ms)",
                    f"server queue {fmt(server.queue_ms_mean)} + prefill {fmt(server.prefill_ms_mean)} "
                    + (
                        f"+ {fmt(outside)} outside (front end, network, the step in flight)"
                        if outside >= 0
                        else "(the server's means exceed the client's TTFT: nothing measurable outside the engine)"
                    ),
                )
            )
        if (share := server.prefix_cache_hit_share) is not None:
            rows.append(("server prefix cache", f"served {share:.0%} of the prompt tokens looked up (no prefill)"))
    for row in rows:
        table.add_row(*row)
    return table


#: a sweep's latency columns: a stream's token times (a pooling batch's: ``POOLED_CELLS``)
STREAMED_CELLS = (
    ("TTFT p50", Metric.TTFT, 50),
    ("TTFT p95", Metric.TTFT, 95),
    ("TPOT p50", Metric.TPOT, 50),
    ("TPOT p95", Metric.TPOT, 95),
    ("ITL p99", Metric.ITL, 99),
)


def sweep_table(results: Results, slos: Sequence[SloTarget], verdicts: Verdicts | None) -> Table:
    """One row per level; cells that breach an SLO in red; each level's verdict (``planner.evidence.verdicts``)."""
    table = Table(
        title="sweep", title_justify="left", caption=goodput_rule(slos) if slos else None, caption_justify="left"
    )
    pooling = any(level.pooling for level in results.levels)
    cells = POOLED_CELLS if pooling else STREAMED_CELLS
    rates = ("req/s", "inputs/s", "prompt tok/s") if pooling else ("tok/s", "req/s")
    for name in ("load", "conc", *(c[0] for c in cells), *rates, "goodput", "errors", "flags"):
        table.add_column(name, justify="left" if name in ("load", "flags") else "right")
    for level in results.levels:
        breached = [s for s in slos if s.met_by(level) is False]
        row = [level.load.label, fmt(level.achieved_concurrency)]
        for _, metric, p in cells:
            text = fmt(level.percentile_ms(metric, p))
            hit = any(s.metric == metric and s.percentile == p for s in breached)
            row.append(f"[bold red]{text}[/]" if hit else text)
        rate, good = level.error_rate, level.goodput_ratio
        errors = "-" if rate is None else f"{level.failed} ({rate:.1%})" if level.failed else "0"
        if any(s.metric is None for s in breached):
            errors = f"[bold red]{errors}[/]"
        flags = ["[red]SLO breach[/]"] if breached else []
        if verdicts is not None:
            style = {"saturated": "red", "knee": "yellow", "untrusted": "yellow"}
            flags += [f"[{style[f]}]{f}[/]" for f in verdicts.of(level.load.label).flags]
        if pooling:
            row += [fmt(level.requests_per_s, 2), fmt(level.inputs_per_s, 1), fmt(level.prompt_tokens_per_s, 0)]
        else:
            row += [fmt(level.output_tokens_per_s, 0), fmt(level.requests_per_s, 2)]
        row += ["-" if good is None else f"{good:.0%}", errors, ", ".join(flags)]
        table.add_row(*row)
    return table
