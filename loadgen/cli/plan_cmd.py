"""``loadgen plan``: the capacity plan from a results file, or from a stated law (what-if)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from loadgen.cli.bounds import bounded
from loadgen.cli.common import choice, consoles, friendly_errors
from loadgen.cli.plan_view import render_plan
from loadgen.errors import UsageError
from loadgen.limits import MAX_TOKENS
from loadgen.profile import find_profile, load_profile
from loadgen.results import Load, Results, SloTarget, load
from planner import PlanRequest, StepModel, parse_slo, plan_for_mix, plan_from_law, plan_from_results

_LAW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*\+\s*(\d+(?:\.\d+)?)\s*\*?\s*b\s*$")


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
    current_batch: Annotated[
        int | None, typer.Option(metavar="N", help="The batch cap (--max-num-seqs) in use now.")
    ] = None,
    replicas: Annotated[int | None, typer.Option(metavar="N", help="Replicas running now.")] = None,
    arrival: Annotated[
        str, typer.Option(metavar="TEXT", help="Arrivals for the sizing simulation: poisson | gamma.")
    ] = "poisson",
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
    json_out: Annotated[bool, typer.Option("--json", metavar="", help="Print the complete plan as JSON.")] = False,
) -> None:
    """Fit the step law, find the largest batch under the SLO, and size replicas for a target QPS."""
    if (not results_files) == (law is None):
        raise UsageError("give a RESULTS file or --law (what-if), not both")
    slos = parse_slos(slo or [])
    calibrations = [(path.name, load(path)) for path in results_files or []]
    results = calibrations[0][1] if calibrations else None
    targets: dict[str, Any] = stored_plan(results) if results is not None else {}
    if profile is not None:
        prof = load_profile(find_profile(profile))
        slos = slos or prof.slo
        targets = {"qps": prof.plan.qps, "output_tokens": prof.plan.output_tokens}
    if results is not None and not slos:
        slos = profile_slos(results)
    qps = qps or targets.get("qps")
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
    ):
        bounded(flag, value, minimum=low, exclusive=exclusive, maximum=high)
    request = PlanRequest(
        slos=slos,
        qps=qps,
        output_tokens=output_tokens,
        max_utilization=max_utilization,
        current_batch=current_batch,
        current_replicas=replicas,
        arrival=choice("--arrival", arrival, ("poisson", "gamma")),
        burstiness=burstiness,
        lengths=parse_lengths(lengths),
        simulate=not no_simulate,
        seed=seed,
        prefill_ms_per_token=prefill_ms_per_token,
        prompt_tokens=prompt_tokens,
    )
    for name, calibration in calibrations:
        if not calibration.levels:
            raise UsageError(f"{name}: the results file has no levels to plan from")
    if len(calibrations) > 1:
        if prompt_tokens is None or output_tokens is None:
            raise UsageError("several RESULTS plan for a mix not measured: give --prompt-tokens and --output-tokens")
        try:
            capacity = plan_for_mix(calibrations, request)
        except ValueError as exc:
            raise UsageError(f"the calibration ({', '.join(n for n, _ in calibrations)}): {exc}") from None
    elif results is not None:
        capacity = plan_from_results(results, request)
    else:
        assert law is not None
        if request.qps and not request.output_tokens:
            raise UsageError("--qps needs --output-tokens in what-if mode")
        capacity = plan_from_law(parse_law(law), request)
    if json_out:
        typer.echo(json.dumps(capacity.to_json(), indent=2))
    else:
        consoles().out.print(render_plan(capacity))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
