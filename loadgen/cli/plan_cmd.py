"""``loadgen plan``: the capacity plan from a results file, or from a stated law (what-if)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from loadgen.cli.bounds import bounded
from loadgen.cli.common import choice, consoles, friendly_errors
from loadgen.cli.fleet_cmd import demand_of, fleet_plan, read_variants
from loadgen.cli.plan_options import (
    BucketOpt,
    CurrentBatchOpt,
    KvCapacityOpt,
    MaxNumBatchedTokensOpt,
    MixOpt,
    PredictLevelsOpt,
    ScaleUpOpt,
    SpareOpt,
    TrafficOpt,
    VariantOpt,
)
from loadgen.cli.plan_view import render_plan
from loadgen.cli.render import rich_report, rich_section
from loadgen.errors import UsageError
from loadgen.inputs.measured import read_measured
from loadgen.inputs.profile import find_profile, load_profile
from loadgen.inputs.workload import DatasetFormat, entry_words, load_dataset
from loadgen.limits import MAX_TOKENS
from loadgen.load import Arrival, Load
from loadgen.results import Results, SloTarget, load
from planner import CapacityPlan, PlanRequest, StepModel, parse_slo, plan_for_mix, plan_from_law, plan_from_results
from planner.capacity.mixplan import MixForecast, PredictedSweep, fit_calibration
from planner.capacity.predicted import predict_levels, predicted_lengths
from planner.capacity.replay import ReplayCheck, most_conservative, replay_check
from planner.laws.lengthsample import LengthSample
from planner.reports.fleet_report import build_fleet_report
from planner.reports.report import predicted_section, replay_section

MAX_PREDICTED_CONCURRENCY = 1024  # a predicted level runs in virtual time: bounded work
_LAW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*\+\s*(\d+(?:\.\d+)?)\s*\*?\s*b\s*$")

SIMULATED_ARRIVALS = (Arrival.POISSON, Arrival.GAMMA)  # the sizing simulation draws arrivals; it replays none


def parse_law(text: str) -> StepModel:
    m = _LAW.match(text)
    if not m:
        raise UsageError(f"--law {text!r}: expected BASE+SLOPEb in ms, e.g. 25+0.4b")
    return StepModel.given(float(m.group(1)), float(m.group(2)))


def parse_slos(texts: list[str]) -> tuple[SloTarget, ...]:
    try:
        return tuple(parse_slo(t) for t in texts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def parse_lengths(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        lengths = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--lengths {text!r}: expected positive integers separated by commas") from None
    if not lengths or min(lengths) < 1:
        raise UsageError(f"--lengths {text!r}: expected positive integers separated by commas")
    return lengths


def profile_slos(results: Results) -> tuple[SloTarget, ...]:
    """The SLOs stated by the profile a sweep ran with, if any."""
    try:
        return tuple(SloTarget.from_key(k, float(v)) for k, v in results.settings.profile_section("slo").items())
    except (TypeError, ValueError) as exc:  # a file written before a key stopped being an SLO (lag, queue)
        raise UsageError(f"the profile stored in the results file: slo: {exc}; give the SLOs with --slo") from None


def profile_gate_levels(results: Results) -> tuple[str, ...] | None:
    """The levels (labels) where the stored profile promises its SLOs, if it names them."""
    levels = results.settings.profile_section("gate").get("levels")
    if not levels:
        return None
    open_loop = results.settings.profile_section("load").get("mode") == "open"
    return tuple(Load("rate" if open_loop else "concurrency", float(v)).label for v in levels)


def stored_plan(results: Results) -> dict[str, Any]:
    """The ``plan`` section (target qps, output tokens) of the profile a sweep ran with, if any."""
    return dict(results.settings.profile_section("plan"))


def dataset_lengths(
    path: Path,
    fmt: DatasetFormat,
    calibrations: list[tuple[str, Results]],
    tokens_per_word: float | None,
    output_tokens: float | None,
) -> LengthSample:
    """Each dataset entry's prompt and output in tokens: words times ``tokens_per_word`` (default: the
    calibration probe's rate, and its template overhead for the prompt); the output is ``output_tokens``
    when given, else the entry's max_tokens, else its recorded answer."""
    rates = [c for _, r in calibrations if (c := r.settings.prompt_calibration)]
    if tokens_per_word is None and not rates:
        raise UsageError(f"--dataset {path}: the calibration files hold no prompt calibration; give --tokens-per-word")
    per_word = tokens_per_word or float(np.mean([c["tokens_per_word"] for c in rates]))
    overhead = float(np.mean([c["overhead_tokens"] for c in rates])) if rates and tokens_per_word is None else 0.0
    prompts, outputs = [], []
    for entry in load_dataset(path, fmt):
        words, answer = entry_words(entry)
        out = output_tokens or entry.max_tokens or (answer and max(1, round(answer * per_word)))
        if not out:
            raise UsageError(
                f"--dataset {path}: an entry has no max_tokens and no recorded answer; give --output-tokens"
            )
        prompts.append(max(0.0, overhead + per_word * words))
        outputs.append(round(out))
    how = "--tokens-per-word" if tokens_per_word is not None else "the calibration probe's, on synthetic words"
    source = f"{path.name} ({len(prompts):,} entries; words x {per_word:.3g} tokens/word, {how})"
    return LengthSample(np.asarray(prompts), np.asarray(outputs, dtype=np.int64), source)


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1 or max(levels) > MAX_PREDICTED_CONCURRENCY:
        raise UsageError(
            f"--predict-levels {text!r}: expected concurrencies from 1 to {MAX_PREDICTED_CONCURRENCY} "
            "separated by commas, e.g. 1,8,16"
        )
    return levels


def predicted_sweep(
    calibrations: list[tuple[str, Results]],
    forecast: MixForecast,
    levels: tuple[int, ...],
    cap: int | None,
    seed: int,
    sample: LengthSample | None,
) -> PredictedSweep:
    """The levels ``levels`` at the forecast's mix (requests drawn from the dataset ``sample`` where given),
    served by its fitted engine (see ``planner.capacity.predicted``)."""
    if forecast.engine is None:
        raise UsageError(f"--predict-levels: {forecast.model.separation_note() or 'the calibration fitted no engine'}")
    budget = forecast.model.budget
    seqs = cap or max(forecast.engine.max_num_seqs, max(levels))
    if budget is not None and budget < seqs:
        raise UsageError(
            f"--max-num-batched-tokens {budget}: below the batch cap {seqs}; give at least one token a sequence"
        )
    engine = dataclasses.replace(
        forecast.engine,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        kv_capacity_tokens=forecast.kv_capacity_tokens,  # known: a sequence waits for room, as on the server
    )
    overhead = forecast.model.ttft_overhead_ms or 0.0
    p95 = forecast.tpot_p95 or fit_calibration(calibrations, 95.0, budget, seed)
    return predict_levels(
        engine,
        forecast.mix,
        predicted_lengths(calibrations, forecast.mix, sample),
        levels,
        residual=forecast.ttft_residual,
        overhead_ms=overhead,
        tpot_p95=p95,
    )


def require_mix(files: int, **flags: object) -> None:
    """A one-line error where flags that only a mix plan reads (``None``: not given) come with one RESULTS."""
    given = ["--" + name.replace("_", "-") for name, value in flags.items() if value is not None]
    if given and files < 2:
        raise UsageError(f"{', '.join(given)}: for a mix plan: give two or more RESULTS")


def mix_plan(calibrations: list[tuple[str, Results]], request: PlanRequest) -> CapacityPlan:
    """The plan for a mix not measured from several calibration sweeps, or a one-line error saying why not."""
    if request.length_sample is None and (request.prompt_tokens is None or request.output_tokens is None):
        raise UsageError(
            "several RESULTS plan for a mix not measured: give --prompt-tokens and --output-tokens, or --dataset"
        )
    for name, calibration in calibrations:
        if not calibration.levels:
            raise UsageError(f"{name}: the results file has no levels to plan from")
    try:
        return plan_for_mix(calibrations, request)
    except ValueError as exc:
        raise UsageError(f"the calibration ({', '.join(n for n, _ in calibrations)}): {exc}") from None


@friendly_errors
def plan(
    results_files: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="RESULTS...",
            help="Results of `run` or `sweep`; several (sweeps at different prompt or output lengths) calibrate "
            "the step model with lengths, which plans for the mix given by --prompt-tokens and --output-tokens.",
        ),
    ] = None,
    law: Annotated[
        str | None, typer.Option(metavar="TEXT", help="What-if without a sweep: the step law, e.g. 25+0.4b (ms).")
    ] = None,
    slo: Annotated[
        list[str] | None,
        typer.Option(metavar="TEXT", help="SLO, e.g. tpot_p95<50ms, ttft_p95<1s (repeatable; default: the profile's)."),
    ] = None,
    profile: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Take SLOs and the plan section from this profile.")
    ] = None,
    qps: Annotated[float | None, typer.Option(metavar="NUMBER", help="Target peak requests per second.")] = None,
    output_tokens: Annotated[
        float | None, typer.Option(metavar="NUMBER", help="Output tokens per request (default: the sweep's).")
    ] = None,
    max_utilization: Annotated[
        float, typer.Option(metavar="NUMBER", help="Utilization target per replica, in (0, 1].")
    ] = 0.8,
    current_batch: CurrentBatchOpt = None,
    replicas: Annotated[int | None, typer.Option(metavar="N", help="Replicas running now.")] = None,
    arrival: Annotated[
        str, typer.Option(metavar="|".join(SIMULATED_ARRIVALS), help="Arrivals for the sizing simulation.")
    ] = Arrival.POISSON,
    burstiness: Annotated[
        float, typer.Option(metavar="NUMBER", help="Gamma shape for the simulation (1 = Poisson).")
    ] = 1.0,
    lengths: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Output lengths of one static batch, e.g. 3,3,3,10.")
    ] = None,
    no_simulate: Annotated[bool, typer.Option("--no-simulate", metavar="", help="Skip the sizing simulation.")] = False,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed of the sizing simulation and the fit's bootstrap.")] = 0,
    prefill_ms_per_token: Annotated[
        float | None,
        typer.Option(
            metavar="NUMBER",
            help="Prefill cost per prompt token in the sizing simulation, ms (default: fitted from TTFT "
            "at concurrency 1, when the sweep ran it).",
        ),
    ] = None,
    prompt_tokens: Annotated[
        float | None,
        typer.Option(
            metavar="NUMBER",
            help="Prompt tokens per request for the prefill term (default: the sweep's); with several RESULTS, "
            "the mix to plan for.",
        ),
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="With several RESULTS: plan for this dataset's lengths (as `run --dataset` reads it): each "
            "request's prompt, and its recorded answer or max_tokens unless --output-tokens is given.",
        ),
    ] = None,
    dataset_format: Annotated[DatasetFormat, typer.Option(help="How to read --dataset.")] = DatasetFormat.AUTO,
    tokens_per_word: Annotated[
        float | None,
        typer.Option(
            metavar="NUMBER",
            help="--dataset: tokens per word of its text (default: the calibration probe's, measured on "
            "synthetic words; real text usually counts fewer).",
        ),
    ] = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    kv_capacity_tokens: KvCapacityOpt = None,
    predict_levels: PredictLevelsOpt = None,
    validate: Annotated[
        Path | None,
        typer.Option(
            metavar="RECORDS",
            help="Check the sizing simulation on the endpoint: replay an open-loop run's --records (each request "
            "at its send time, with its lengths) through the plan's engine, simulated beside measured.",
        ),
    ] = None,
    variant: VariantOpt = None,
    traffic: TrafficOpt = None,
    bucket: BucketOpt = "60s",
    scale_up_s: ScaleUpOpt = 0.0,
    spare: SpareOpt = 0,
    mix: MixOpt = False,
    json_out: Annotated[bool, typer.Option("--json", metavar="", help="Print the complete plan as JSON.")] = False,
) -> None:
    """Fit the step law, find the largest batch under the SLO, and size replicas for a target QPS (or a fleet)."""
    prof = load_profile(find_profile(profile)) if profile is not None else None
    if prof is not None and not variant and not results_files and law is None:
        variant = list(prof.plan.variants) or None  # the profile's fleet
    if variant:
        if results_files or law is not None:
            raise UsageError("--variant plans a fleet from each variant's results: give no RESULTS or --law beside it")
    elif results_files and law is not None:
        raise UsageError("give a RESULTS file or --law (what-if), not both")
    elif not results_files and law is None:
        raise UsageError("give a RESULTS file to plan from, --law for a what-if, or --variant for a fleet")
    elif traffic is not None or mix or spare or scale_up_s:
        raise UsageError("--traffic, --mix, --spare and --scale-up-s plan a fleet: give each variant with --variant")
    slos = parse_slos(slo or [])
    concurrencies = parse_levels(predict_levels) if predict_levels is not None else ()
    variants = read_variants(variant) if variant else []
    calibrations = [(path.name, load(path)) for path in results_files or []]
    if variants:  # the first variant's file stands for the sweep: its profile's SLOs and plan targets
        calibrations = [(variants[0].path.name, variants[0].results)]
    results = calibrations[0][1] if calibrations else None
    targets: dict[str, Any] = stored_plan(results) if results is not None else {}
    if prof is not None:
        slos = slos or prof.slo
        targets = {"qps": prof.plan.qps, "output_tokens": prof.plan.output_tokens}
    if results is not None and not slos:
        slos = profile_slos(results)
    qps = qps or (targets.get("qps") if traffic is None else None)
    output_tokens = output_tokens or targets.get("output_tokens")
    for flag, value, low, exclusive, high in (
        ("--max-utilization", max_utilization, 0, True, 1),
        ("--qps", qps, 0, True, None),
        ("--output-tokens", output_tokens, 0, True, MAX_TOKENS),
        ("--burstiness", burstiness, 0, True, None),
        ("--current-batch", current_batch, 1, False, None),
        ("--replicas", replicas, 0, False, None),
        ("--prefill-ms-per-token", prefill_ms_per_token, 0, False, None),
        ("--prompt-tokens", prompt_tokens, 0, False, MAX_TOKENS),
        ("--tokens-per-word", tokens_per_word, 0, True, None),
        ("--max-num-batched-tokens", max_num_batched_tokens, 1, False, MAX_TOKENS),
        ("--kv-capacity-tokens", kv_capacity_tokens, 1, False, None),
        ("--scale-up-s", scale_up_s, 0, False, None),
        ("--spare", spare, 0, False, None),
    ):
        bounded(flag, value, minimum=low, exclusive=exclusive, maximum=high)
    drawn = choice("--arrival", arrival, SIMULATED_ARRIVALS)
    if variants:
        fleet = fleet_plan(
            variants,
            demand_of(traffic, qps, bucket),
            slos,
            output_tokens=output_tokens,
            max_utilization=max_utilization,
            scale_up_s=scale_up_s,
            spare=spare,
            mix=mix,
            arrival=drawn,
            burstiness=burstiness,
            seed=seed,
        )
        if json_out:
            typer.echo(json.dumps(fleet.to_json(), indent=2))
        else:
            consoles().out.print(rich_report(build_fleet_report(fleet)))
        return
    request = PlanRequest(
        slos=slos,
        qps=qps,
        output_tokens=output_tokens,
        max_utilization=max_utilization,
        current_batch=current_batch,
        current_replicas=replicas,
        arrival=drawn,
        burstiness=burstiness,
        lengths=parse_lengths(lengths),
        simulate=not no_simulate,
        seed=seed,
        prefill_ms_per_token=prefill_ms_per_token,
        prompt_tokens=prompt_tokens,
        token_budget=max_num_batched_tokens,
        kv_capacity_tokens=kv_capacity_tokens,
    )
    require_mix(
        len(calibrations),
        dataset=dataset,
        max_num_batched_tokens=max_num_batched_tokens,
        kv_capacity_tokens=kv_capacity_tokens,
        predict_levels=predict_levels,
    )
    if dataset is not None:
        sample = dataset_lengths(dataset, dataset_format, calibrations, tokens_per_word, output_tokens)
        request = dataclasses.replace(request, length_sample=sample)
    if results is not None and not results.levels:
        raise UsageError(f"{calibrations[0][0]}: the results file has no levels to plan from")
    if results is None and request.qps and not request.output_tokens:
        raise UsageError("--qps needs --output-tokens in what-if mode")

    def planned(request: PlanRequest) -> CapacityPlan:
        if len(calibrations) > 1:
            return mix_plan(calibrations, request)
        if results is not None:
            return plan_from_results(results, request)
        assert law is not None
        return plan_from_law(parse_law(law), request)

    capacity = planned(request)
    predicted: PredictedSweep | None = None
    if concurrencies and capacity.mix is not None:
        predicted = predicted_sweep(
            calibrations, capacity.mix, concurrencies, current_batch, seed, request.length_sample
        )
    checks = replayed(capacity, validate, slos) if validate is not None else ()
    engine_text = capacity.engine.law_text if capacity.engine is not None else ""
    if request.qps and (correction := most_conservative(c.correction for c in checks)) is not None:
        capacity = planned(dataclasses.replace(request, correction=correction))  # replicas on the endpoint's terms
    if json_out:
        doc = capacity.to_json()
        if predicted is not None:
            doc["predicted_levels"] = [dataclasses.asdict(level) for level in predicted.levels]
            doc["predicted_lengths"] = predicted.lengths
        if validate is not None:
            doc["validation"] = [check.to_json() for check in checks]
        typer.echo(json.dumps(doc, indent=2))
    else:
        consoles().out.print(render_plan(capacity))
        if predicted is not None and capacity.mix is not None:
            for part in rich_section(predicted_section(predicted, capacity.mix)):
                consoles().out.print(part)
        if checks:
            for part in rich_section(replay_section(checks, engine_text)):
                consoles().out.print(part)


def replayed(capacity: CapacityPlan, records: Path, slos: tuple[SloTarget, ...]) -> tuple[ReplayCheck, ...]:
    """Each level of ``records`` replayed through the engine the plan's sizing simulation runs (and corrected
    for each TTFT or E2E SLO of ``slos``)."""
    if capacity.engine is None:
        raise UsageError(
            f"--validate {records}: the plan has no batch to run its engine at: give --current-batch (the server's "
            "--max-num-seqs) or an SLO that bounds the batch"
        )
    checks = []
    for level in read_measured(records):
        check = replay_check(
            capacity.engine,
            level.label,
            level.sent_s,
            level.prompt_tokens,
            level.output_tokens,
            level.ttft_ms,
            level.e2e_ms,
            slos=slos,
            send_lag_ms=level.send_lag_ms,
        )
        if level.skipped:
            left_out = f"{level.skipped} completed requests had no prompt length (the server sent no usage): left out"
            check = dataclasses.replace(check, note=f"{check.note}; {left_out}")
        checks.append(check)
    return tuple(checks)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
