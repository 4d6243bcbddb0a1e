"""A plan's answers in words: the law, the batch, replicas, the mix's forecast, predicted levels, the replay (pure).

Rounding happens here and only here: every renderer (terminal, Markdown, HTML) shows these strings.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.capacity.batch_limit import BatchLimit, model_name
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.mix_forecast import MixForecast, PredictedSweep
from planner.capacity.sizing import Estimate, SimOutcome
from planner.capacity.validation import ReplayCheck
from planner.evidence.verdicts import LevelVerdict
from planner.laws.lengthmodel import Coefficient, Prediction, tpot_features, ttft_idle_features
from planner.laws.stepmodel import StepModel
from planner.reports.document import Section, Table


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


def batch_text(batch: int | None, lower_bound: bool) -> str:
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
    lines += _law_lines(plan)
    if plan.saturation is not None and plan.saturation.max_batch is not None:
        lines.append(
            f"saturation: effective max batch B ~ {plan.saturation.max_batch:.1f} "
            f"(signals: {', '.join(plan.saturation.agreed)})"
        )
    lines += [_limit_line(plan, lim) for lim in plan.limits]
    if plan.max_batch is not None and plan.step_ms_at_max_batch is not None:
        lines.append(_at_batch_line(plan, plan.max_batch, plan.step_ms_at_max_batch))
    lines += _replica_lines(plan)
    if plan.batching is not None:
        b = plan.batching
        lines.append(
            f"static batching: {b.useful_slot_steps} useful of {b.static_slot_steps} slot-steps "
            f"({b.static:.1%}); continuous: {b.continuous:.0%} of occupied slot-steps"
        )
    return lines


def _law_lines(plan: CapacityPlan) -> list[str]:
    """The throughput law, each TPOT SLO's own law, and the prefill the steps carry."""
    lines = []
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
    return lines


def _limit_line(plan: CapacityPlan, lim: BatchLimit) -> str:
    """One SLO's largest batch, measured beside modelled, and how sure it is."""
    shown = "any" if lim.quality == "any batch" and lim.batch is None else batch_text(lim.batch, lim.is_lower_bound)
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
    if lim.quality == "resolved" and lim.batch == plan.max_batch and (basis := untrusted_basis(plan)) is not None:
        parts.append(f"[resolved between untrusted levels {basis[0]}: {basis[1]}]")
    elif lim.quality == "unresolved" and not lim.more_requests:
        parts.append("[unresolved: no percentile interval at one of the two levels around it]")
    else:
        parts.append(f"[{lim.quality}]")
    if lim.more_requests:
        parts.append(f"~{lim.more_requests} more requests per level would resolve it")
    return " ".join(parts) + (f"; {lim.note}" if lim.note else "")


def _at_batch_line(plan: CapacityPlan, batch: int, step: float) -> str:
    """The step, each SLO law's reading and the throughput at the chosen batch."""
    text = f"at batch {batch_text(batch, plan.max_batch_lower_bound)} ({plan.max_batch_method}): step {step:.1f} ms"
    for lim in plan.limits:
        if lim.model is not None and lim.model is not plan.fit:
            value = float(lim.model.step_ms(batch))
            if lim.slo.percentile is not None and lim.slo.percentile > 50 and value < step:
                # the laws cross here: a high percentile is never below the median
                text += f", {model_name(lim.slo)} >= {step:.1f} ms (its law reads {value:.1f})"
            else:
                text += f", {model_name(lim.slo)} {value:.1f} ms"
    return (
        f"{text}, {fmt(plan.tokens_per_s_per_replica)} tok/s per replica, "
        f"{fmt(plan.tokens_per_s_per_user)} tok/s per user"
    )


def _replica_lines(plan: CapacityPlan) -> list[str]:
    """Replicas by the utilisation rule and the simulation, and the count recommended."""
    if plan.sizing is None:
        return []
    s = plan.sizing
    lines = [
        f"replicas for {s.needed_tokens_per_s:,.0f} tok/s: {s.replicas_no_headroom} with no headroom "
        f"(utilization {s.utilization_no_headroom:.2f}), {s.replicas_at_utilization} at "
        f"utilization <= {s.max_utilization:g}"
    ]
    if plan.simulated is not None:
        text = f"simulated: {_sim_text(plan.simulated)}"
        if plan.simulated_below is not None:
            text += f"; {_sim_text(plan.simulated_below)}"
        lines.append(text)
    if plan.recommended_replicas is None:
        lines.append(f"recommended: {plan.replicas_method}")
    else:
        lines.append(f"recommended: {replicas_text(plan.recommended_replicas)} ({plan.replicas_method})")
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
    """The sweep not run, as a report section (``plan``/``report --predict-levels``): each TTFT with its 95%
    interval; the means beside the percentiles where the calibration gave means only."""
    added = (
        "what the calibration measured beyond the same engine at that many clients (each statistic its own)"
        if forecast.ttft_residual is not None
        else f"the fitted overhead {forecast.model.ttft_overhead_ms or 0.0:.1f} ms"
    )
    means = forecast.model.statistic == "tpot_mean"
    rows = tuple(
        (
            f"c={lv.concurrency}",
            _with_range(lv.ttft_p50_ms, lv.ttft_p50_range_ms),
            _with_range(lv.ttft_p95_ms, lv.ttft_p95_range_ms),
            *((_with_range(lv.ttft_mean_ms, lv.ttft_mean_range_ms),) if means else ()),
            _with_range(lv.tpot_p50_ms, lv.tpot_p50_range_ms),
            _with_range(lv.tpot_p95_ms, lv.tpot_p95_range_ms),
            *((_with_range(lv.tpot_mean_ms, lv.tpot_mean_range_ms),) if means else ()),
        )
        for lv in predicted.levels
    )
    unmeasured = (
        " The calibration gave means only: the percentiles are the engine's, with the residual of the mean "
        "(not measured: act on the means)."
        if means
        else ""
    )
    return Section(
        title=f"PREDICTED levels for {forecast.mix.label} tokens",
        paragraphs=(
            "A sweep not run: the fitted engine closed-loop in the simulator, in virtual time, at the asked mix "
            f"(lengths: {predicted.lengths}); TTFT plus {added}, with its 95% interval (the engine at either end "
            "of its own, and the residual's); TPOT p95 from the model fitted on TPOT p95, at the batch the level "
            "runs; each TPOT's interval the engine at either end and the law's at the mix, widened to the error of "
            f"the calibration's own mixes each predicted from the others.{unmeasured} Re-measure these levels on the server before acting on the plan.",
        ),
        table=Table(
            (
                "load",
                "TTFT p50 ms",
                "TTFT p95 ms",
                *(("TTFT mean ms",) if means else ()),
                "TPOT p50 ms",
                "TPOT p95 ms",
                *(("TPOT mean ms",) if means else ()),
            ),
            rows,
        ),
    )


def _with_range(value: float | None, interval: tuple[float, float] | None) -> str:
    """``1,112 (1,050..1,420)``: a predicted value and its 95% interval."""
    if value is None:
        return "-"
    if interval is None:
        return fmt(value)
    return f"{fmt(value)} ({fmt(interval[0])}..{fmt(interval[1])})"


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
        title="VALIDATION: the measured run replayed through the sizing simulation",
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


def untrusted_basis(plan: CapacityPlan) -> tuple[str, str, bool] | None:
    """Where the levels on either side of the plan's batch (the nearest below it and above it on the batch
    axis) did not measure the server: their labels, their causes in a word or two, and whether only the
    measurement is to blame (a busy client, a short window). An answer interpolated between two client-bound
    levels read clean on its action line while only the evidence line said "5 of 7 levels untrusted"."""
    if plan.verdicts is None or plan.max_batch is None or plan.source != "sweep":
        return None
    levels = plan.verdicts.observations.levels
    below = max((o for o in levels if o.batch <= plan.max_batch), key=lambda o: o.batch, default=None)
    above = min((o for o in levels if o.batch > plan.max_batch), key=lambda o: o.batch, default=None)
    untrusted = [v for v in (plan.verdicts.of(o.label) for o in (below, above) if o is not None) if not v.trusted]
    if not untrusted:
        return None
    causes = ", ".join(dict.fromkeys(_cause(v, problem) for v in untrusted for problem in v.problems))
    return ", ".join(v.label for v in untrusted), causes, all(v.runner_only for v in untrusted)


def _cause(verdict: LevelVerdict, problem: str) -> str:
    """A level's problem in a word or two: ``c=32: client-bound (generator CPU 96% busy) ...`` -> ``client-bound``;
    one a longer window would answer -> ``too short a window``; the service's own -> ``the server failed``."""
    if problem in verdict.window:
        return "too short a window"
    if problem in verdict.service:
        return "the server failed"
    text = problem.split(": ", 1)[-1]
    return text.split(" (", 1)[0].split(":", 1)[0].split(";", 1)[0]
