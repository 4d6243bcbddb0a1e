"""``loadgen plan``: the capacity plan from a results file, or from a stated law (what-if), or a fleet's."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadgen.choices import SIMULATED_ARRIVALS, Arrival
from loadgen.cli.common import consoles, friendly_errors
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
from loadgen.errors import UsageError
from loadgen.inputs.workload import DatasetFormat
from loadgen.plan_defaults import MAX_UTILIZATION

if TYPE_CHECKING:
    from loadgen.cli.plan_inputs import PlanFlags
    from loadgen.results import Results
    from planner.capacity.capacity_plan import CapacityPlan


def refuse_pooling(calibrations: Sequence[tuple[str, Results]]) -> None:
    """The planner sizes generation (its step law, TTFT and TPOT): a pooling sweep is read, not planned."""
    for name, results in calibrations:
        if results.pooling:
            raise UsageError(
                f"{name}: an {results.settings.api} run: the planner sizes generation (TTFT, TPOT, output tokens); "
                f"read its latency and inputs/s with: loadgen report {name}"
            )


def check_sources(flags: PlanFlags) -> None:
    """Exactly one source of evidence (RESULTS, --law or --variant), and fleet flags only with a fleet."""
    if flags.variant:
        if flags.results_files or flags.law is not None:
            raise UsageError("--variant plans a fleet from each variant's results: give no RESULTS or --law beside it")
    elif flags.results_files and flags.law is not None:
        raise UsageError("give a RESULTS file or --law (what-if), not both")
    elif not flags.results_files and flags.law is None:
        raise UsageError("give a RESULTS file to plan from, --law for a what-if, or --variant for a fleet")
    elif flags.traffic is not None or flags.mix or flags.spare or flags.scale_up_s:
        raise UsageError("--traffic, --mix, --spare and --scale-up-s plan a fleet: give each variant with --variant")


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
        float | None,
        typer.Option(
            metavar="NUMBER",
            help=f"Utilization target per replica, in (0, 1] (default: the profile's, or {MAX_UTILIZATION:g}).",
        ),
    ] = None,
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
    seed: Annotated[
        int | None,
        typer.Option(
            metavar="N", help="Seed of the sizing simulation and the fit's bootstrap (default: the profile's)."
        ),
    ] = None,
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
    next_sweep: Annotated[
        bool,
        typer.Option(
            "--next-sweep",
            metavar="",
            help="A mix plan: print only the one calibration sweep that would pin its answer (the asked mix, at "
            "concurrencies past the law's batch).",
        ),
    ] = False,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain", "-v", metavar="", help="Below the decision: the levels, every law, the sizing simulation."
        ),
    ] = False,
) -> None:
    """Fit the step law, find the largest batch under the SLO, and size replicas for a target QPS (or a fleet)."""
    said = {name: value for name, value in locals().items() if name not in ("json_out", "explain", "next_sweep")}
    from loadgen.cli.plan_inputs import PlanFlags, read_plan_inputs
    from loadgen.cli.plan_view import render_outcome
    from planner import plan as answer
    from planner.reports.report import evidence_caveats

    flags = PlanFlags(**said)
    inputs = read_plan_inputs(flags, check_sources)
    refuse_pooling(inputs.calibrations)
    outcome = answer(inputs)
    if next_sweep:
        typer.echo(_next_sweep(outcome.capacity))
    elif json_out:
        typer.echo(json.dumps(outcome.to_json(), indent=2))
    else:
        notes = evidence_caveats(inputs.calibrations, inputs.request.slos)
        for part in render_outcome(outcome, notes, explain=explain):
            consoles().out.print(part)


def _next_sweep(capacity: CapacityPlan | None) -> str:
    """The sweep that pins a mix plan's answer: the asked mix, at concurrencies past the law's batch for the
    first TPOT SLO (else past the calibration's largest batch)."""
    from planner.capacity.mix_forecast import next_sweep as mix_next_sweep

    forecast = capacity.mix if capacity is not None else None
    if forecast is None:
        raise UsageError(
            "--next-sweep names the sweep that pins a plan for a mix not measured: give several RESULTS and "
            "--prompt-tokens/--output-tokens"
        )
    point = next((lim.model_batch for lim in forecast.limits if lim.model_batch), None)
    batch = point or math.ceil(forecast.model.ranges()["batch"][1])
    return f"for {forecast.mix.label}: {mix_next_sweep(forecast.mix, batch)}"


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
