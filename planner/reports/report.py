"""The report's content: one ``Report`` value (``planner.reports.document``), which the renderers draw as
Markdown, self-contained HTML and (by the CLI) rich; its plan text is ``planner.reports.plan_text``'s.

The report states the tool version,
the profile, the target (never credentials), the date, and the metric
definitions; it says out loud what the numbers do not: client-bound levels,
estimated token counts, extrapolated answers, incomplete runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results
from loadgen.slo_target import SloTarget
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.mix_forecast import PredictedSweep
from planner.evidence.caveats import measurement_caveats
from planner.evidence.said_once import said_once, said_once_across
from planner.evidence.verdicts import Verdicts, judge
from planner.laws.ttft_residual import ResidualRow, TtftResidual
from planner.reports.decision import decide, deciding_limit, weak_limits
from planner.reports.document import DEFINITIONS, Plot, Report, Section, Table
from planner.reports.per_model import model_breaches, model_section
from planner.reports.plan_text import (
    batch_text,
    fmt,
    plan_lines,
    predicted_section,
    replicas_text,
    surface_table,
    untrusted_basis,
)

#: a pooling API's (embeddings, rerank) latency columns: its request latency, as no token stream is timed
POOLED_CELLS = (("latency p50", Metric.E2E, 50), ("latency p95", Metric.E2E, 95), ("latency p99", Metric.E2E, 99))


def level_rows(results: Results, verdicts: Verdicts | None, slos: Sequence[SloTarget] = ()) -> Table:
    """One row per level, its flags as the sweep's table words them (``SLO breach``, the state, ``untrusted``)."""
    if any(lv.pooling for lv in results.levels):
        return _pooled_rows(results, verdicts, slos)
    rows = []
    reasoning = any(lv.reasoning_tokens for lv in results.levels)  # a reasoning model: its answer's start too
    for lv in results.levels:
        flags = _level_flags(lv, verdicts, slos)
        if lv.tokens_estimated:
            flags.append("tokens estimated")
        rate, good = lv.error_rate, lv.goodput_ratio
        rows.append(
            (
                lv.load.label,
                fmt(lv.achieved_concurrency),
                fmt(lv.percentile_ms(Metric.TTFT, 50)),
                fmt(lv.percentile_ms(Metric.TTFT, 95)),
                *(
                    (fmt(lv.percentile_ms(Metric.TTFO, 50)), fmt(lv.percentile_ms(Metric.TTFO, 95)))
                    if reasoning
                    else ()
                ),
                fmt(lv.percentile_ms(Metric.TPOT, 50)),
                fmt(lv.percentile_ms(Metric.TPOT, 95)),
                fmt(lv.percentile_ms(Metric.ITL, 99)),
                fmt(lv.output_tokens_per_s, 0),
                fmt(lv.requests_per_s, 2),
                "-" if good is None else f"{good:.1%}",
                "-" if rate is None else f"{rate:.2%}",
                ", ".join(flags),
            )
        )
    return Table(
        (
            "load",
            "conc",
            "TTFT p50 ms",
            "TTFT p95 ms",
            *(("TTFO p50 ms", "TTFO p95 ms") if reasoning else ()),
            "TPOT p50 ms",
            "TPOT p95 ms",
            "ITL p99 ms",
            "tok/s",
            "req/s",
            "goodput",
            "errors",
            "flags",
        ),
        tuple(rows),
    )


def _level_flags(lv: LevelResult, verdicts: Verdicts | None, slos: Sequence[SloTarget]) -> list[str]:
    """A level's flags as the sweep's table words them: ``SLO breach``, then its verdict's."""
    flags = ["SLO breach"] if any(s.met_by(lv) is False for s in slos) else []
    return flags + list(verdicts.of(lv.load.label).flags if verdicts else ())


def _pooled_rows(results: Results, verdicts: Verdicts | None, slos: Sequence[SloTarget]) -> Table:
    """A pooling sweep's levels: request latency, and requests, inputs and prompt tokens served per second."""
    rows = []
    for lv in results.levels:
        flags = _level_flags(lv, verdicts, slos)
        rate, good = lv.error_rate, lv.goodput_ratio
        rows.append(
            (
                lv.load.label,
                fmt(lv.achieved_concurrency),
                *(fmt(lv.percentile_ms(metric, p)) for _, metric, p in POOLED_CELLS),
                fmt(lv.requests_per_s, 2),
                fmt(lv.inputs_per_s, 1),
                fmt(lv.prompt_tokens_per_s, 0),
                "-" if good is None else f"{good:.1%}",
                "-" if rate is None else f"{rate:.2%}",
                ", ".join(flags),
            )
        )
    columns = ("load", "conc", *(f"{name} ms" for name, _, _ in POOLED_CELLS), "req/s", "inputs/s", "prompt tok/s")
    return Table((*columns, "goodput", "errors", "flags"), tuple(rows))


def residual_section(residual: TtftResidual) -> Section:
    """Each calibration level's TTFT beside the fitted engine run at it, and the line fitted on the rest."""
    by_level: dict[str, dict[float | None, ResidualRow]] = {}
    for term in residual.terms:
        for row in term.rows:
            by_level.setdefault(row.label, {})[term.percentile] = row
    rows = []
    for label, stats in by_level.items():
        cells = []
        for term in residual.terms:
            stat = stats.get(term.percentile)
            cells += [fmt(stat.measured_ms), fmt(stat.simulated_ms), fmt(stat.residual_ms)] if stat else ["-"] * 3
        rows.append((label, *cells))
    return Section(
        title="TTFT beyond the fitted engine",
        paragraphs=(
            "Each calibration level's TTFT beside the fitted engine run closed-loop at that level's mix and "
            "concurrency: the rest is what the engine does not hold (the front end, the hop into the engine, "
            "the spread of real steps). A line in the clients is fitted on it per statistic and added to every "
            "predicted TTFT and to the TTFT/E2E SLOs of the sizing simulation (never below zero, never falling "
            "with the load).",
        ),
        bullets=tuple(term.text for term in residual.terms),
        table=Table(
            ("level", *(f"{t.name} {part}" for t in residual.terms for part in ("measured", "engine", "rest"))),
            tuple(rows),
        ),
    )


def ttft_split_section(results: Results, name: str = "") -> Section | None:
    """Per level, the mean TTFT (from the send) split by the server's own per-request times (vLLM's
    request_queue_time and request_prefill_time); None where no level scraped them."""
    rows = []
    for lv in results.levels:
        server, ttft = lv.server, lv.mean_ms(Metric.TTFT_SENT)
        outside = server.outside_engine_ms(ttft) if server is not None else None
        if server is None or outside is None:
            continue
        rows.append(
            (
                lv.load.label,
                fmt(ttft),
                fmt(server.queue_ms_mean),
                fmt(server.prefill_ms_mean),
                fmt(outside) if outside >= 0 else "0*",
                fmt(server.prefill_requests, 0),
                "-" if (share := server.prefix_cache_hit_share) is None else f"{share:.0%}",
            )
        )
    if not rows:
        return None
    starred = (
        " 0*: the server's means exceed the client's TTFT there (they average the requests the server finished "
        "in the window, not quite the same ones), so nothing measurable is outside the engine."
        if any(row[4] == "0*" for row in rows)
        else ""
    )
    return Section(
        title=f"Where TTFT goes{': ' + name if name else ''}",
        paragraphs=(
            "The mean TTFT from the send, and the server's own means over the same window: waiting for a batch "
            "slot (queue), and from admission to the first token (prefill). The rest is outside both: the API "
            "server's front end (HTTP, tokenising, handing the request on), the network, the first chunk's way "
            "back, and on vLLM the step already running when the request reached the engine (its engine core "
            "takes requests in only between steps; its queue time starts after that step). The prompt tokens the "
            "server's prefix cache served (of those it looked up) were not prefilled." + starred,
        ),
        table=Table(
            ("load", "TTFT mean ms", "queue ms", "prefill ms", "outside engine ms", "server requests", "prompt cached"),
            tuple(rows),
        ),
    )


def goodput_rule(slos: Sequence[SloTarget]) -> str:
    """How goodput was counted, naming each SLO's percentile: the threshold applies per request."""
    limits = [
        f"{s.metric.value} <= {s.limit:g} ms (from {s.key.removesuffix('_ms')})" for s in slos if s.metric is not None
    ]
    if not limits:
        return "goodput: no latency SLO, so every completed request counts"
    return (
        "goodput: the share of requests (failures included) whose own numbers met every SLO threshold: "
        + ", ".join(limits)
        + ("; ITL is a request's largest gap" if any(s.metric == Metric.ITL for s in slos) else "")
    )


def slo_verdicts(results: Results, slos: Sequence[SloTarget], verdicts: Verdicts | None = None) -> Table | None:
    """Each level against each SLO; a level the verdicts do not trust passes nothing ("untrusted")."""
    if not slos:
        return None
    rows = []
    for lv in results.levels:
        cells = [lv.load.label]
        trusted = verdicts is None or verdicts.of(lv.load.label).trusted
        for slo in slos:
            value, ok = slo.value(lv), slo.met_by(lv)
            shown = "-" if value is None else (f"{value:.2%}" if slo.metric is None else f"{value:,.1f} ms")
            word = "no data" if ok is None else "FAIL" if not ok else "pass" if trusted else "untrusted"
            cells.append(f"{word} ({shown})")
        rows.append(tuple(cells))
    return Table(("load", *[f"{s.key} <= {s.limit:g}" for s in slos]), tuple(rows))


def level_verdicts(results: Results, plan: CapacityPlan | None, slos: Sequence[SloTarget]) -> Verdicts | None:
    """The plan's verdicts when there is a plan, else the same judgement for these SLOs' percentiles."""
    if plan is not None and plan.verdicts is not None:
        return plan.verdicts
    return judge(results.levels, [q for s in slos if (q := s.quantity) is not None]) if results.levels else None


def caveats(results: Results, plan: CapacityPlan | None = None, slos: Sequence[SloTarget] = ()) -> tuple[str, ...]:
    """Things the numbers do not say by themselves (terminal notes and the report's Caveats): the run's own
    notes, why levels are untrusted, the evidence's caveat rules (``planner.evidence.caveats``), models
    that break an SLO and the plan's weak answers, each said once (``said_once``)."""
    verdicts = level_verdicts(results, plan, slos)
    out = [*results.notes, *(verdicts.problems if verdicts is not None else ()), *measurement_caveats(results)]
    if (breaches := model_breaches(results, slos)) is not None:
        out.append(breaches)
    if plan is not None:
        out += plan_caveats(plan)
    return tuple(said_once(out))


def evidence_caveats(calibrations: Sequence[tuple[str, Results]], slos: Sequence[SloTarget]) -> tuple[str, ...]:
    """What the results a plan rests on say of themselves; with several sweeps, each note names its files (a note
    several files share, once)."""
    if len(calibrations) == 1:
        return caveats(calibrations[0][1], None, slos)
    return tuple(
        said_once_across((name, note) for name, results in calibrations for note in caveats(results, None, slos))
    )


def plan_caveats(plan: CapacityPlan) -> list[str]:
    """What the plan's own answers do not say by themselves: limits not measured, and its warnings."""
    return weak_limits(plan) + list(plan.warnings)


DETAILS = "How the plan was obtained"


def build_report(
    results: Results, plan: CapacityPlan | None, slos: Sequence[SloTarget], plots: tuple[Plot, ...] = ()
) -> Report:
    profile = results.settings.profile_name or "-"
    meta = (
        ("tool", f"loadgen {results.run.tool_version}"),
        ("date", results.run.started_at),
        ("target", f"{results.target.base_url} ({results.target.api} API)"),
        ("model", results.target.model),
        ("profile", str(profile)),
        (
            "measured as",
            f"{results.settings.start} start (closed loop), "
            f"{results.settings.metric_convention} convention for token timing",
        ),
        (
            "run",
            f"{results.run.command} {results.run.id}, {len(results.levels)} level(s), "
            f"{'complete' if results.complete else 'INCOMPLETE'}",
        ),
    )
    trust = level_verdicts(results, plan, slos)
    notes = caveats(results, None, slos)
    lead = decide(plan, notes).sections() if plan is not None else ()
    sections = [*lead, Section(title="Levels", table=level_rows(results, trust, slos))]
    if (split := ttft_split_section(results)) is not None:
        sections.append(split)
    if (models := model_section(results, slos)) is not None:
        sections.append(models)
    verdicts = slo_verdicts(results, slos, trust)
    if verdicts is not None:
        sections.append(Section(title="SLO verdicts", paragraphs=(goodput_rule(slos),), table=verdicts))
    if plan is not None:
        sections.append(Section(title=DETAILS, bullets=tuple(plan_lines(plan))))
        sections.append(Section(title="Diagnosis", bullets=tuple(f.message for f in plan.findings)))
    elif notes:
        sections.append(Section(title="Caveats", bullets=notes))
    sections.append(Section(title="Appendix: metric definitions", paragraphs=(DEFINITIONS,)))
    title = f"Capacity report: {results.target.model}"
    return Report(
        title=title,
        headline=headline(results, plan, slos),
        meta=meta,
        sections=tuple(sections),
        plots=plots,
        lead=len(lead),
    )


def build_mix_report(
    calibrations: Sequence[tuple[str, Results]],
    plan: CapacityPlan,
    slos: Sequence[SloTarget],
    plots: tuple[Plot, ...] = (),
    predicted: PredictedSweep | None = None,
) -> Report:
    """The report of a plan for a mix not measured: each calibration sweep's levels, the fitted surface
    beside what was measured, the prediction for the asked mix (and the sweep not run, where asked for),
    and the plan acted on."""
    assert plan.mix is not None
    first = calibrations[0][1]
    meta = (
        ("tool", f"loadgen {first.run.tool_version}"),
        ("date", first.run.started_at),
        ("target", f"{first.target.base_url} ({first.target.api} API)"),
        ("model", first.target.model),
        ("calibration", ", ".join(f"{name} ({len(r.levels)} level(s))" for name, r in calibrations)),
        ("planned for", f"{plan.mix.mix.label} tokens, a mix not measured"),
    )
    lead = decide(plan, evidence_caveats(calibrations, slos)).sections()
    sections = [*lead] + [
        Section(title=f"Levels: {name}", table=level_rows(results, level_verdicts(results, None, slos), slos))
        for name, results in calibrations
    ]
    sections.append(
        Section(
            title="Step model with lengths",
            paragraphs=(
                "Each calibration row measured beside what the model fitted on all of them says, then the asked "
                "mix as predicted (95% bootstrap intervals). A row the model cannot answer for says so.",
            ),
            table=surface_table(plan.mix),
        )
    )
    if plan.mix.ttft_residual is not None:
        sections.append(residual_section(plan.mix.ttft_residual))
    sections += [split for name, results in calibrations if (split := ttft_split_section(results, name)) is not None]
    if predicted is not None:
        sections.append(predicted_section(predicted, plan.mix))
    sections.append(Section(title=DETAILS, bullets=tuple(plan_lines(plan))))
    if plan.findings:
        sections.append(Section(title="Diagnosis", bullets=tuple(f.message for f in plan.findings)))
    sections.append(Section(title="Appendix: metric definitions", paragraphs=(DEFINITIONS,)))
    parts = plan_answer(plan)
    if plan.mix.max_rate_rps is not None:
        parts.append(f"one replica holds {plan.mix.max_rate_rps:.3g} requests/s")
    answer = "; ".join(parts) or "no batch or replica count could be predicted"
    headline = f"PREDICTED for {plan.mix.mix.label} tokens (a mix not measured): {answer}."
    title = f"Capacity plan for a mix not measured: {first.target.model}"
    return Report(title=title, headline=headline, meta=meta, sections=tuple(sections), plots=plots, lead=len(lead))


def plan_answer(plan: CapacityPlan) -> list[str]:
    """The deciding batch and the replica count, as the headline states them."""
    parts = []
    if plan.max_batch is not None:
        deciding = deciding_limit(plan)
        slo = (
            f" under {deciding.slo.key} <= {deciding.slo.limit:g}"
            if deciding is not None
            else f" ({plan.max_batch_method})"
            if plan.max_batch_method
            else ""
        )
        parts.append(f"max batch {batch_text(plan.max_batch, plan.max_batch_lower_bound)}{slo}")
    if plan.recommended_replicas is not None and plan.sizing is not None:
        parts.append(
            f"{replicas_text(plan.recommended_replicas)} for {plan.sizing.needed_tokens_per_s:,.0f} output tok/s"
        )
    return parts


def headline(results: Results, plan: CapacityPlan | None, slos: Sequence[SloTarget]) -> str:
    """One sentence: the deciding batch and replica count when there is a plan, and whether to trust them."""
    parts = plan_answer(plan) if plan is not None else []
    verdicts = level_verdicts(results, plan, slos)
    if results.pooling and (best := _most_inputs(results, slos, verdicts)) is not None:
        p95 = best.percentile_ms(Metric.E2E, 95)
        within = " within every SLO" if slos else ""
        parts.append(
            f"most inputs/s{within}: {best.inputs_per_s:,.1f} at {best.load.label} (latency p95 {fmt(p95)} ms)"
        )
    untrusted = 0 if verdicts is None else sum(1 for lv in verdicts.levels if not lv.trusted)
    n = len(results.levels)
    trust = f"{n} level(s), {untrusted} untrusted" if untrusted else f"{n} level(s), all trusted"
    if plan is not None and (basis := untrusted_basis(plan)) is not None:
        trust += f" (the batch rests on untrusted levels {basis[0]}: {basis[1]})"
    if not results.complete:
        trust += ", run incomplete"
    return "; ".join([*parts, trust]) + "."


def _most_inputs(results: Results, slos: Sequence[SloTarget], verdicts: Verdicts | None) -> LevelResult | None:
    """A pooling sweep's answer: the trusted level serving the most inputs/s that meets every SLO."""
    meeting = [
        lv
        for lv in results.levels
        if lv.inputs_per_s
        and all(s.met_by(lv) is not False for s in slos)
        and (verdicts is None or verdicts.of(lv.load.label).trusted)
    ]
    return max(meeting, key=lambda lv: lv.inputs_per_s or 0.0, default=None)
