"""One ``Report`` value, rendered three ways: Markdown, self-contained HTML, and (by the CLI) rich.

Rounding happens here and only here. The report states the tool version,
the profile, the target (never credentials), the date, and the metric
definitions; it says out loud what the numbers do not: client-bound levels,
estimated token counts, extrapolated answers, incomplete runs.
"""

from __future__ import annotations

import base64
import csv
import html
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.results import (
    CORE_SHARED,
    LevelResult,
    Metric,
    Results,
    SloTarget,
    mean_output_tokens,
    mean_prompt_tokens,
)
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.mixplan import MixForecast, PredictedSweep
from planner.capacity.replay import ReplayCheck
from planner.capacity.sizing import Estimate, SimOutcome
from planner.capacity.slo import model_name
from planner.evidence.verdicts import Verdicts, judge
from planner.laws.lengthmodel import Coefficient, Prediction, tpot_features, ttft_idle_features
from planner.laws.stepmodel import StepModel
from planner.laws.ttft_residual import PERCENTILES, ResidualRow, TtftResidual
from planner.reports.markdown import md_text

DEFINITIONS = (
    "TTFT is the time from when a request was due (its scheduled arrival, or the moment its client became free) "
    "to the first token event (a chunk carrying an output token's delta, empty-content ones included, unless "
    "the run used the text convention), so client-side queueing counts; TPOT is a request's mean gap "
    "between output tokens, (t_last - t_first) / (tokens - 1); ITL is every gap between consecutive token events, "
    "pooled; E2E runs from due time to the end of the stream. Percentiles come from HdrHistograms (3 significant "
    "digits). Throughput counts output tokens that arrived inside the measured window (warm-up and drain "
    "excluded); failed requests count in the error rate and stay out of the latencies. Goodput is the share of "
    "requests (failures included) that met every latency SLO of the profile on their own numbers: each request's "
    "TTFT, TPOT and E2E against each SLO's threshold (a percentile SLO's threshold, applied per request). A level "
    "is saturated when two independent signals agree (batch or throughput plateau, TTFT growing ~1/X per client, "
    "a server queue), and untrusted when it is client-bound, interrupted, failing too many requests, shorter than "
    "three request lifetimes, or has too few samples for a percentile asked (a p95 needs 59, a p99 299)."
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
class Plot:
    """One figure for the HTML report (drawn by ``planner.reports.plots``, which alone imports matplotlib)."""

    name: str
    caption: str
    png: bytes
    # reference lines as drawn: name -> (value, pixel column of an x mark or row from the top of a y mark)
    marks: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass(frozen=True, slots=True)
class Report:
    title: str
    headline: str  # the answer in one sentence, first thing a reader sees
    meta: tuple[tuple[str, str], ...]
    sections: tuple[Section, ...]
    plots: tuple[Plot, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The report as data (``report --json``): the same sections the Markdown shows."""
        return {
            "title": self.title,
            "headline": self.headline,
            "meta": dict(self.meta),
            "sections": [
                {
                    "title": sec.title,
                    "paragraphs": list(sec.paragraphs),
                    "table": None
                    if sec.table is None
                    else [dict(zip(sec.table.columns, row)) for row in sec.table.rows],
                    "bullets": list(sec.bullets),
                }
                for sec in self.sections
            ],
        }


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table cell; "-" when there is no data (never a silent 0)."""
    return "-" if value is None else f"{value:,.{digits}f}"


def law_text(m: StepModel, statistic: str) -> str:
    """A law as the plan used it: coefficients, and for a fitted one its range, R^2 and whether it extrapolates."""
    text = f"step_ms(b) = {m.base_ms:.2f} + {m.per_seq_ms:.3f}*b"
    if m.n_levels == 0:
        return text
    ci = f", slope 95% CI {m.per_seq_ci_ms[0]:.3f}..{m.per_seq_ci_ms[1]:.3f}" if m.per_seq_ci_ms else ""
    r2 = f", R^2 {m.r_squared:.3f}" if m.r_squared is not None else ""
    text += (
        f", fitted on {statistic} over b = {m.fitted_batch_range[0]:.1f}..{m.fitted_batch_range[1]:.1f} "
        f"({m.n_levels} levels{r2}{ci})"
    )
    return text if m.extrapolates else text + f"; not used beyond the measured levels ({m.trust_note})"


def _batch_text(batch: int | None, lower_bound: bool) -> str:
    if batch is None:
        return "none"
    return f">= {batch}" if lower_bound else str(batch)


def _estimate_text(e: Estimate) -> str:
    op = "<=" if e.verdict == "pass" else ">" if e.verdict == "fail" else "~"
    return (
        f"{e.key.removesuffix('_ms')} {e.value_ms:,.0f} ms (95% CI {e.low_ms:,.0f}..{e.high_ms:,.0f}) "
        f"{op} {e.limit_ms:g}"
    )


def _sim_text(o: SimOutcome) -> str:
    head = f"{o.replicas} {o.verdict}"
    if o.verdict == "unstable":
        return f"{o.replicas} overloaded (utilization {o.utilization:.2f} >= 1: the queue grows without bound)"
    detail = "; ".join(_estimate_text(e) for e in o.estimates)
    return f"{head} (utilization {o.utilization:.2f}, {o.replications} replications: {detail})"


def replicas_text(n: int | None) -> str:
    """``1 replica``, ``7 replicas``."""
    return f"{n} replica" if n == 1 else f"{n} replicas"


def plan_lines(plan: CapacityPlan) -> list[str]:
    """The plan's answer in a few lines (terminal, report, and the end of a sweep)."""
    lines = mix_lines(plan.mix) if plan.mix is not None else []
    if plan.fit is not None:
        name = "law at the mix, predicted" if plan.source == "mix" else "law"
        lines.append(f"{name}: {law_text(plan.fit, plan.fit_statistic.replace('_', ' ').replace('tpot', 'TPOT'))}")
    for lim in plan.limits:
        if lim.model is not None and lim.model is not plan.fit:
            lines.append(f"{model_name(lim.slo)} law: {law_text(lim.model, model_name(lim.slo))}")
    if plan.prefill is not None and plan.decode is not None and plan.fit is not None:
        pf, share = plan.prefill, plan.fit.per_seq_ms - plan.decode.per_seq_ms
        where = (
            f"added to the stated decode law {plan.decode.base_ms:g}+{plan.decode.per_seq_ms:g}b"
            if plan.source == "law"
            else f"held in the fitted slope; the simulation runs the decode step {plan.decode.base_ms:.2f} + "
            f"{plan.decode.per_seq_ms:.3f}*b with prefill in the steps that admit prompts"
        )
        lines.append(
            f"prefill: {pf.ms_per_token:.3g} ms/token x {pf.prompt_tokens:,.0f} prompt tokens ({pf.source}) = "
            f"{share:.3g} ms per running sequence per step, {where}"
        )
    if plan.saturation is not None and plan.saturation.max_batch is not None:
        lines.append(
            f"saturation: effective max batch B ~ {plan.saturation.max_batch:.1f} "
            f"(signals: {', '.join(plan.saturation.agreed)})"
        )
    for lim in plan.limits:
        shown = (
            "any" if lim.quality == "any batch" and lim.batch is None else _batch_text(lim.batch, lim.is_lower_bound)
        )
        parts = [f"{lim.slo.key} <= {lim.slo.limit:g}: max batch {shown}"]
        if plan.source == "law":  # what-if: nothing was measured, so nothing is said to be
            if lim.model_batch is not None:
                parts.append(f"(model {lim.model_batch})")
        elif lim.measured_batch is not None or lim.model_batch is not None:
            measured = lim.measured_batch if lim.measured_batch is not None else "-"
            model = "-" if lim.model_batch is None else str(lim.model_batch)
            if lim.model_batch is not None and lim.model is not None and lim.model.trust_note:
                model += f" from a law not trusted beyond its levels: {lim.model.trust_note}"
            parts.append(f"(measured {measured}, model {model})")
        parts.append(f"[{lim.quality}]")
        if lim.more_requests:
            parts.append(f"~{lim.more_requests} more requests per level would resolve it")
        lines.append(" ".join(parts) + (f"; {lim.note}" if lim.note else ""))
    if plan.max_batch is not None and plan.step_ms_at_max_batch is not None:
        text = (
            f"at batch {_batch_text(plan.max_batch, plan.max_batch_lower_bound)} ({plan.max_batch_method}): "
            f"step {plan.step_ms_at_max_batch:.1f} ms"
        )
        for lim in plan.limits:
            if lim.model is not None and lim.model is not plan.fit:
                value = float(lim.model.step_ms(plan.max_batch))
                if lim.slo.percentile is not None and lim.slo.percentile > 50 and value < plan.step_ms_at_max_batch:
                    # the laws cross here: a high percentile is never below the median
                    text += f", {model_name(lim.slo)} >= {plan.step_ms_at_max_batch:.1f} ms (its law reads {value:.1f})"
                else:
                    text += f", {model_name(lim.slo)} {value:.1f} ms"
        lines.append(
            f"{text}, {fmt(plan.tokens_per_s_per_replica)} tok/s per replica, "
            f"{fmt(plan.tokens_per_s_per_user)} tok/s per user"
        )
    if plan.sizing is not None:
        s = plan.sizing
        lines.append(
            f"replicas for {s.needed_tokens_per_s:,.0f} tok/s: {s.replicas_no_headroom} with no headroom "
            f"(utilization {s.utilization_no_headroom:.2f}), {s.replicas_at_utilization} at "
            f"utilization <= {s.max_utilization:g}"
        )
        if plan.simulated is not None:
            text = f"simulated: {_sim_text(plan.simulated)}"
            if plan.simulated_below is not None:
                text += f"; {_sim_text(plan.simulated_below)}"
            lines.append(text)
        if plan.recommended_replicas is None:
            lines.append(f"recommended: {plan.replicas_method}")
        else:
            lines.append(f"recommended: {replicas_text(plan.recommended_replicas)} ({plan.replicas_method})")
    if plan.batching is not None:
        b = plan.batching
        lines.append(
            f"static batching: {b.useful_slot_steps} useful of {b.static_slot_steps} slot-steps "
            f"({b.static:.1%}); continuous: {b.continuous:.0%} of occupied slot-steps"
        )
    return lines


UNITS = {"base_ms": "ms", "per_seq_ms": "ms/seq", "per_kv_ms": "ms/1k KV tokens", "prefill_ms_per_token": "ms/token",
         "prefill_attention_ms": "ms/1M prefill token pairs", "overhead_ms": "ms"}  # fmt: skip


def coefficient_text(c: Coefficient) -> str:
    """``per_kv_ms 0.803 ms/1k KV tokens (95% CI 0.776..0.809)``, or that the calibration could not fit it."""
    if c.value is None:
        return f"{c.name} {c.note}" if c.note else f"{c.name} not separated"
    ci = f" (95% CI {c.ci[0]:.4g}..{c.ci[1]:.4g})" if c.ci else ""
    return f"{c.name} {c.value:.4g} {UNITS[c.name]}{ci}"


def mix_lines(forecast: MixForecast) -> list[str]:
    """What the length model is, what it predicts for the asked mix, and how far it reaches."""
    m = forecast.model
    sweeps = len({p.group for p in m.points})
    r2 = f", R^2 {m.r_squared:.4f}" if m.r_squared is not None else ""
    lines = [
        f"step model with lengths ({m.statistic.replace('_', ' ')} and TTFT at concurrency 1, {len(m.points)} rows "
        f"from {sweeps} sweeps{r2}, median relative residual {m.residual_mad:.2%}): "
        + "; ".join(coefficient_text(c) for c in m.coefficients)
    ]
    ranges = m.ranges()
    lines.append(
        "calibrated on "
        + ", ".join(f"{k.replace('_', ' ')} {lo:,.0f}..{hi:,.0f}" for k, (lo, hi) in ranges.items())
        + (f"; token budget {m.budget} per step" if m.budget else "")
    )
    if forecast.ttft_residual is not None:
        lines.extend(term.text for term in forecast.ttft_residual.terms)
    where = "; extrapolated: " + "; ".join(forecast.extrapolation) if forecast.extrapolation else ""
    lines.append(f"PREDICTED for {forecast.mix.label} tokens, a mix not measured{where}")
    if forecast.max_rate_rps is not None or forecast.max_rate_note:
        rate = f"{forecast.max_rate_rps:.3g} requests/s" if forecast.max_rate_rps is not None else "none"
        lines.append(f"largest request rate one replica holds: {rate} ({forecast.max_rate_note})")
    if forecast.budget is not None or forecast.budget_note:
        budget = f"--max-num-batched-tokens {forecast.budget}" if forecast.budget is not None else "no budget"
        lines.append(f"recommended {budget} ({forecast.budget_note})")
    if forecast.kv_batch is not None:
        lines.append(f"KV cache: at most batch {forecast.kv_batch} ({forecast.kv_note})")
    return lines


def _prediction_text(p: Prediction | None) -> str:
    return "not estimable" if p is None else f"{p.value_ms:,.2f} ({p.low_ms:,.2f}..{p.high_ms:,.2f})"


def predicted_section(predicted: PredictedSweep, forecast: MixForecast) -> Section:
    """The sweep not run, as a report section (``plan``/``report --predict-levels``)."""
    added = (
        "what the calibration measured beyond the same engine at that many clients (each statistic its own)"
        if forecast.ttft_residual is not None
        else f"the fitted overhead {forecast.model.ttft_overhead_ms or 0.0:.1f} ms"
    )
    rows = tuple(
        (f"c={lv.concurrency}", *(fmt(v) for v in (lv.ttft_p50_ms, lv.ttft_p95_ms, lv.tpot_p50_ms, lv.tpot_p95_ms)))
        for lv in predicted.levels
    )
    return Section(
        f"PREDICTED levels for {forecast.mix.label} tokens",
        paragraphs=(
            "A sweep not run: the fitted engine closed-loop in the simulator, in virtual time, at the asked mix "
            f"(lengths: {predicted.lengths}); TTFT plus {added}; TPOT p95 from the model fitted on TPOT p95. "
            "Re-measure these levels on the server before acting on the plan.",
        ),
        table=Table(("load", "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms", "TPOT p95 ms"), rows),
    )


def replay_section(checks: Sequence[ReplayCheck], engine: str) -> Section:
    """A measured run replayed through the plan's engine (``plan --validate``): measured beside simulated,
    and beside the simulation again with the correction that run measured."""
    rows = tuple(
        (
            check.label,
            f"{check.requests} at {check.rate_rps:.3g}/s",
            row.statistic,
            fmt(row.measured_ms),
            fmt(row.simulated_ms),
            f"{row.ratio:.2f}x",
            check.verdict,
            fmt(corrected.simulated_ms) if corrected is not None else "-",
        )
        for check in checks
        for row, corrected in zip(check.rows, check.corrected or (None,) * len(check.rows), strict=True)
    )
    return Section(
        "VALIDATION: the measured run replayed through the sizing simulation",
        paragraphs=(
            f"Each completed request sent again at its own send time, with its own prompt and output lengths, to "
            f"the engine the sizing simulation runs ({engine}); TTFT and E2E from the send, as the clients timed them. "
            "Corrected: the same replay with every step term scaled so the total decode time is the measured one, "
            "and each TTFT (and E2E) plus the mean TTFT the server added beyond that; a plan given --qps sizes "
            "its replicas so, with each TTFT/E2E SLO's own statistic apart where that is larger.",
        ),
        table=Table(
            ("level", "requests", "statistic", "measured ms", "simulated ms", "ratio", "verdict", "corrected ms"), rows
        ),
        bullets=tuple(
            f"{check.label}: {check.verdict}: {check.note}"
            + (f"; correction: {check.correction.text}" if check.correction is not None else "")
            for check in checks
        ),
    )


def surface_table(forecast: MixForecast) -> Table:
    """The fitted surface in numbers: every calibration row, measured beside what the model says, then the
    asked mix, predicted at batch 1, at each batch the plan acts on and at the largest batch calibrated."""
    m = forecast.model
    statistic = m.statistic.replace("_", " ").replace("tpot", "TPOT")
    rows = []
    for point in m.points:
        fit = m.fitted(point)
        residual = "-" if fit is None or not point.value_ms else f"{fit.value_ms / point.value_ms - 1:+.1%}"
        rows.append(
            (
                point.label,
                statistic if point.kind == "tpot" else "TTFT at c=1",
                f"{point.mix.prompt_tokens:,.0f}",
                f"{point.mix.output_tokens:,.0f}",
                fmt(point.batch),
                fmt(point.value_ms, 2),
                _prediction_text(fit),
                residual,
            )
        )
    mix, asked = forecast.mix, "asked mix, PREDICTED"
    prompt, output = f"{mix.prompt_tokens:,.0f}", f"{mix.output_tokens:,.0f}"
    batches = sorted({1, round(m.ranges()["batch"][1]), *(lim.batch for lim in forecast.limits if lim.batch)})
    for b in batches:
        predicted = _prediction_text(m.predict(tpot_features(b, mix)))
        rows.append((asked, statistic, prompt, output, fmt(b), "-", predicted, "-"))
    ttft = _prediction_text(m.predict(ttft_idle_features(mix, m.budget)))
    rows.append((asked, "TTFT at c=1", prompt, output, fmt(1), "-", ttft, "-"))
    columns = ("row", "statistic", "prompt", "output", "batch", "measured ms", "model ms (95% CI)", "model/measured")
    return Table(columns, tuple(rows))


def level_rows(results: Results, verdicts: Verdicts | None) -> Table:
    rows = []
    for lv in results.levels:
        flags = list(verdicts.of(lv.load.label).flags) if verdicts else []
        if lv.tokens_estimated:
            flags.append("tokens estimated")
        rate, good = lv.error_rate, lv.goodput_ratio
        rows.append(
            (
                lv.load.label,
                fmt(lv.achieved_concurrency),
                fmt(lv.percentile_ms(Metric.TTFT, 50)),
                fmt(lv.percentile_ms(Metric.TTFT, 95)),
                fmt(lv.percentile_ms(Metric.TPOT, 50)),
                fmt(lv.percentile_ms(Metric.TPOT, 95)),
                fmt(lv.percentile_ms(Metric.ITL, 99)),
                fmt(lv.output_tokens_per_s, 0),
                fmt(lv.requests_per_s, 2),
                "-" if good is None else f"{good:.1%}",
                "-" if rate is None else f"{rate:.2%}",
                ", ".join(flags) or "ok",
            )
        )
    return Table(
        (
            "load",
            "conc",
            "TTFT p50 ms",
            "TTFT p95 ms",
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


def residual_section(residual: TtftResidual) -> Section:
    """Each calibration level's TTFT beside the fitted engine run at it, and the line fitted on the rest."""
    by_level: dict[str, dict[float, ResidualRow]] = {}
    for term in residual.terms:
        for row in term.rows:
            by_level.setdefault(row.label, {})[term.percentile] = row
    rows = []
    for label, stats in by_level.items():
        cells = []
        for q in PERCENTILES:
            stat = stats.get(q)
            cells += [fmt(stat.measured_ms), fmt(stat.simulated_ms), fmt(stat.residual_ms)] if stat else ["-"] * 3
        rows.append((label, *cells))
    return Section(
        "TTFT beyond the fitted engine",
        paragraphs=(
            "Each calibration level's TTFT beside the fitted engine run closed-loop at that level's mix and "
            "concurrency: the rest is what the engine does not hold (the front end, the hop into the engine, "
            "the spread of real steps). A line in the clients is fitted on it per statistic and added to every "
            "predicted TTFT and to the TTFT/E2E SLOs of the sizing simulation (never below zero, never falling "
            "with the load).",
        ),
        bullets=tuple(term.text for term in residual.terms),
        table=Table(
            ("level", *(f"p{q:g} {part}" for q in PERCENTILES for part in ("measured", "engine", "rest"))),
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
                fmt(outside),
                fmt(server.prefill_requests, 0),
                "-" if (share := server.prefix_cache_hit_share) is None else f"{share:.0%}",
            )
        )
    if not rows:
        return None
    return Section(
        f"Where TTFT goes{': ' + name if name else ''}",
        paragraphs=(
            "The mean TTFT from the send, and the server's own means over the same window: waiting for a batch "
            "slot (queue), and from admission to the first token (prefill). The rest is outside both: the API "
            "server's front end (HTTP, tokenising, handing the request on), the network, the first chunk's way "
            "back, and on vLLM the step already running when the request reached the engine (its engine core "
            "takes requests in only between steps; its queue time starts after that step). The prompt tokens the "
            "server's prefix cache served (of those it looked up) were not prefilled.",
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


PROMPT_TOLERANCE = 0.10  # realised prompt tokens this far from the request: said out loud
SHORT_ANSWERS = 0.90  # answers shorter than this share of max_tokens on average: the server stopped early


def level_verdicts(results: Results, plan: CapacityPlan | None, slos: Sequence[SloTarget]) -> Verdicts | None:
    """The plan's verdicts when there is a plan, else the same judgement for these SLOs' percentiles."""
    if plan is not None and plan.verdicts is not None:
        return plan.verdicts
    return judge(results.levels, [q for s in slos if (q := s.quantity) is not None]) if results.levels else None


def caveats(results: Results, plan: CapacityPlan | None = None, slos: Sequence[SloTarget] = ()) -> tuple[str, ...]:
    """Things the numbers do not say by themselves (terminal notes and the report's Caveats)."""
    out = list(results.notes)
    if results.settings.virtual_time:
        out.append("measured in virtual time (--virtual-time): the simulator's law, exactly, with no client cost "
                   "and no network; a real endpoint's numbers need a real run")  # fmt: skip
    verdicts = level_verdicts(results, plan, slos)
    if verdicts is not None:
        out += verdicts.problems
    asked, asked_out = results.settings.prompt_mean, results.settings.output_mean
    for lv in results.levels:
        realised = mean_prompt_tokens([lv])
        if asked and realised and abs(realised / asked - 1) > PROMPT_TOLERANCE:
            out.append(f"{lv.load.label}: prompts averaged {realised:.0f} tokens where {asked:g} were asked (the "
                       "server's tokenizer); the results describe the realised length")  # fmt: skip
        answered = mean_output_tokens([lv])
        if asked_out and answered and answered < SHORT_ANSWERS * asked_out:
            out.append(f"{lv.load.label}: answers averaged {answered:.0f} tokens where up to {asked_out:g} were asked: "
                       "the server stopped early (end of sequence); for fixed lengths pass --extra-body "
                       "'{\"ignore_eos\": true}' (vLLM, SGLang)")  # fmt: skip
        if lv.tokens_estimated:
            out.append(f"{lv.load.label}: output tokens were counted from chunks (no usage from the server)")
        if lv.loop_lag_p99_ms is not None and lv.loop_lag_p99_ms > lv.lag_threshold_ms and not lv.client_bound:
            wait = lv.core_wait_ratio
            shared = (f", as it shared its core (it waited {wait:.0%} of the time it was ready to run for a core "
                      "another process held)" if wait is not None and wait >= CORE_SHARED else "")  # fmt: skip
            out.append(f"{lv.load.label}: the generator's event loop ran timers {lv.loop_lag_p99_ms:.0f} ms late "
                       f"at p99{shared}: chunk timestamps can be that late in bursts (tail percentiles are upper "
                       "bounds; the medians and the throughput hold)")  # fmt: skip
        if lv.empty:
            out.append(f"{lv.load.label}: {lv.empty} requests succeeded without streaming any output token: they "
                       "count as completed but are in no TTFT, TPOT or ITL (check ignore_eos or the prompt)")  # fmt: skip
        if lv.failed:
            kinds = ", ".join(f"{k.value} {n}" for k, n in sorted(lv.errors.items()))
            out.append(f"{lv.load.label}: {lv.failed} failed requests ({kinds})")
    if not results.complete:
        out.append("the run is incomplete: it was interrupted, the levels shown are the ones that finished")
    if plan is not None:
        out += plan_caveats(plan)
    return tuple(dict.fromkeys(out))


def plan_caveats(plan: CapacityPlan) -> list[str]:
    """What the plan's own answers do not say by themselves: limits not measured, and its warnings."""
    out = [
        f"{lim.slo.key}: {lim.quality}" + (f" ({lim.note})" if lim.note else "")
        for lim in plan.limits
        if lim.quality in ("extrapolated", "unresolved", "insufficient range", "lower bound", "unknown")
    ]
    return out + list(plan.warnings)


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
    sections = [Section("Levels", table=level_rows(results, trust))]
    if (split := ttft_split_section(results)) is not None:
        sections.append(split)
    verdicts = slo_verdicts(results, slos, trust)
    if verdicts is not None:
        sections.append(Section("SLO verdicts", paragraphs=(goodput_rule(slos),), table=verdicts))
    if plan is not None:
        sections.append(Section("Capacity plan", bullets=tuple(plan_lines(plan))))
        sections.append(Section("Diagnosis", bullets=tuple(f.message for f in plan.findings)))
    notes = caveats(results, plan, slos)
    if notes:
        sections.append(Section("Caveats", bullets=notes))
    sections.append(Section("Metric definitions", paragraphs=(DEFINITIONS,)))
    title = f"Capacity report: {results.target.model}"
    return Report(title, headline(results, plan, slos), meta, tuple(sections), plots)


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
    sections = [
        Section(f"Levels: {name}", table=level_rows(results, level_verdicts(results, None, slos)))
        for name, results in calibrations
    ]
    sections.append(
        Section(
            "Step model with lengths",
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
    sections.append(Section("Capacity plan", bullets=tuple(plan_lines(plan))))
    if plan.findings:
        sections.append(Section("Diagnosis", bullets=tuple(f.message for f in plan.findings)))
    notes = [f"{name}: {note}" for name, results in calibrations for note in caveats(results, None, slos)]
    notes += plan_caveats(plan)
    if notes:
        sections.append(Section("Caveats", bullets=tuple(dict.fromkeys(notes))))
    sections.append(Section("Metric definitions", paragraphs=(DEFINITIONS,)))
    parts = plan_answer(plan)
    if plan.mix.max_rate_rps is not None:
        parts.append(f"one replica holds {plan.mix.max_rate_rps:.3g} requests/s")
    answer = "; ".join(parts) or "no batch or replica count could be predicted"
    headline = f"PREDICTED for {plan.mix.mix.label} tokens (a mix not measured): {answer}."
    return Report(f"Capacity plan for a mix not measured: {first.target.model}", headline, meta, tuple(sections), plots)


def plan_answer(plan: CapacityPlan) -> list[str]:
    """The deciding batch and the replica count, as the headline states them."""
    parts = []
    if plan.max_batch is not None:
        deciding = min(
            (lim for lim in plan.limits if lim.batch is not None), key=lambda lim: lim.batch or 0, default=None
        )
        slo = (
            f" under {deciding.slo.key} <= {deciding.slo.limit:g}"
            if deciding is not None
            else f" ({plan.max_batch_method})"
            if plan.max_batch_method
            else ""
        )
        parts.append(f"max batch {_batch_text(plan.max_batch, plan.max_batch_lower_bound)}{slo}")
    if plan.recommended_replicas is not None and plan.sizing is not None:
        parts.append(
            f"{replicas_text(plan.recommended_replicas)} for {plan.sizing.needed_tokens_per_s:,.0f} output tok/s"
        )
    return parts


def headline(results: Results, plan: CapacityPlan | None, slos: Sequence[SloTarget]) -> str:
    """One sentence: the deciding batch and replica count when there is a plan, and whether to trust them."""
    parts = plan_answer(plan) if plan is not None else []
    verdicts = level_verdicts(results, plan, slos)
    untrusted = 0 if verdicts is None else sum(1 for lv in verdicts.levels if not lv.trusted)
    n = len(results.levels)
    trust = f"{n} level(s), {untrusted} untrusted" if untrusted else f"{n} level(s), all trusted"
    if not results.complete:
        trust += ", run incomplete"
    return "; ".join([*parts, trust]) + "."


def to_markdown(report: Report) -> str:
    out = [f"# {md_text(report.title)}", "", f"**{md_text(report.headline)}**", ""]
    out += [f"- **{k}**: {md_text(v)}" for k, v in report.meta]
    for section in report.sections:
        out += ["", f"## {section.title}", ""]
        out += [md_text(p) + "\n" for p in section.paragraphs]
        if section.table is not None:
            t = section.table
            out.append("| " + " | ".join(md_text(c) for c in t.columns) + " |")
            out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(t.columns))) + "|")
            out += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in t.rows]
        out += [f"- {md_text(b)}" for b in section.bullets]
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
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(report.title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{e(report.title)}</h1>",
        f"<p><strong>{e(report.headline)}</strong></p>",
        '<dl class="meta">',
    ]
    out += [f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in report.meta]
    out.append("</dl>")
    for section in report.sections:
        out.append(f"<h2>{e(section.title)}</h2>")
        out += [f"<p>{e(p)}</p>" for p in section.paragraphs]
        if section.table is not None:
            out.append(
                "<table><thead><tr>"
                + "".join(f"<th>{e(c)}</th>" for c in section.table.columns)
                + "</tr></thead><tbody>"
            )
            for row in section.table.rows:
                cells = "".join((FAIL_TD if c.startswith("FAIL") else "<td>") + f"{e(c)}</td>" for c in row)
                out.append(f"<tr>{cells}</tr>")
            out.append("</tbody></table>")
        if section.bullets:
            out.append("<ul>" + "".join(f"<li>{e(b)}</li>" for b in section.bullets) + "</ul>")
    if report.plots:
        out.append('<h2>Plots</h2><div class="plots">')
        for plot in report.plots:
            out.append(
                f'<figure id="{e(plot.name)}"><img alt="{e(plot.caption)}" src="{plot.data_uri}"{_mark_attrs(plot)}>'
                f"<figcaption>{e(plot.caption)}</figcaption></figure>"
            )
        out.append("</div>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


CSV_COLUMNS = (
    "load_kind",
    "load_value",
    "window_s",
    "completed",
    "failed",
    "error_rate",
    "achieved_concurrency",
    "output_tokens_per_s",
    "requests_per_s",
    "offered_per_s",
    "prompt_tokens_mean",
    "output_tokens_mean",
    "tokens_estimated",
    "client_bound",
    "goodput_ratio",
)


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
    row: list[object] = [
        lv.load.kind,
        lv.load.value,
        round(lv.window_s, 3),
        lv.completed,
        lv.failed,
        lv.error_rate,
        s["achieved_concurrency"],
        s["output_tokens_per_s"],
        s["requests_per_s"],
        s["offered_per_s"],
        s["prompt_tokens_mean"],
        s["output_tokens_mean"],
        lv.tokens_estimated,
        lv.client_bound,
        lv.goodput_ratio,
    ]
    for m in Metric:
        stats = s[f"{m.value}_ms"]
        row += [stats[k] for k in ("mean", "p50", "p90", "p95", "p99", "max")]
    return ["" if v is None else v for v in row]


def _mark_attrs(plot: Plot) -> str:
    """A plot's reference lines as data attributes (``data-knee="24" data-knee-px="310.5"``), so a browser
    test can check each is drawn where the numbers say."""
    return "".join(
        f' data-{html.escape(name)}="{value:g}" data-{html.escape(name)}-px="{px:.1f}"'
        for name, (value, px) in plot.marks.items()
    )
