"""``loadgen sweep``: a profile's levels in order, checkpointed after each, with early stop."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadgen.choices import EventLoop, Mode, Placement, Scrape, Start, Transport
from loadgen.cli.bounds import bounded, field_flag
from loadgen.cli.common import EXIT_RUN_ERROR, check_writable, consoles, friendly_errors, save_results
from loadgen.cli.options import (
    LOAD,
    TARGET,
    ApiKeyOpt,
    ConventionOpt,
    DurationOpt,
    EventLoopOpt,
    HeaderOpt,
    InsecureOpt,
    JsonOpt,
    MaxEventOpt,
    ModelOpt,
    OutputOpt,
    QuietOpt,
    RayCpusOpt,
    RayOpt,
    RayPlacementOpt,
    RequestIdOpt,
    RetriesOpt,
    ScrapeOpt,
    StartOpt,
    TimeoutOpt,
    TransportOpt,
    VirtualTimeOpt,
    WarmupOpt,
    WorkersOpt,
)
from loadgen.errors import UsageError
from loadgen.limits import MAX_BATCH, MAX_LEVELS
from loadgen.wire.sse import Convention

if TYPE_CHECKING:
    from loadgen.inputs.profile import Profile
    from loadgen.results import Results
    from loadgen.run.observe import LevelObserver
    from loadgen.run.session import SessionHooks
    from loadgen.slo_target import SloTarget
    from planner import CapacityPlan


def parse_levels(text: str | None, mode: str) -> tuple[float, ...] | None:
    """``--levels`` for a profile's load mode: the bounds a profile's own levels have (``loadgen.limits``)."""
    from loadgen.inputs.profile import level_bound

    if text is None:
        return None
    try:
        levels = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--levels: expected numbers separated by commas, got {text!r}") from None
    if not levels or any(not (math.isfinite(v) and v > 0) for v in levels):
        raise UsageError(f"--levels: every level must be a finite number > 0, got {text!r}")
    if len(levels) > MAX_LEVELS:
        raise UsageError(f"--levels: at most {MAX_LEVELS} levels, got {len(levels)}")
    if mode == "closed" and any(v != int(v) for v in levels):
        raise UsageError(f"--levels: closed-loop levels are client counts (integers), got {text!r}")
    bound = level_bound(mode)
    for value in levels:
        bounded("--levels", value, minimum=bound.minimum, exclusive=bound.exclusive, maximum=bound.maximum)
    return levels


def parse_batch_sizes(text: str | None) -> tuple[int, ...] | None:
    """``--batch-sizes``: whole numbers from 1 to ``MAX_BATCH``, in the order given."""
    if text is None:
        return None
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--batch-sizes: expected whole numbers separated by commas, got {text!r}") from None
    if not sizes or len(sizes) > MAX_LEVELS or any(not 1 <= b <= MAX_BATCH for b in sizes):
        raise UsageError(f"--batch-sizes: 1 to {MAX_LEVELS} sizes, each from 1 to {MAX_BATCH}, got {text!r}")
    return tuple(dict.fromkeys(sizes))


@friendly_errors
def sweep(
    profile: Annotated[
        str,
        typer.Option(
            "--profile",
            "-p",
            metavar="NAME|FILE",
            rich_help_panel=LOAD,
            help="Profile name (see `profile list`) or path.",
        ),
    ],
    url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            rich_help_panel=TARGET,
            help="Base URL (overrides the profile's target; 'sim' for the built-in simulator).",
        ),
    ] = None,
    levels: Annotated[
        str | None, typer.Option(metavar="A,B,...", rich_help_panel=LOAD, help="Override the levels, e.g. 1,2,4,8.")
    ] = None,
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            metavar="A,B,...",
            rich_help_panel=LOAD,
            help="Embeddings, rerank: inputs per request; every level is measured at each, e.g. 1,8,32.",
        ),
    ] = None,
    duration: DurationOpt = None,
    warmup: WarmupOpt = None,
    requests: Annotated[
        int | None, typer.Option(metavar="N", rich_help_panel=LOAD, help="Override the request budget per level.")
    ] = None,
    min_requests: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            rich_help_panel=LOAD,
            help="Request floor per level: a level runs past its duration "
            "until this many completed (default: what the SLOs' "
            "percentiles need, e.g. 59 for a p95).",
        ),
    ] = None,
    prompt_tokens: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            rich_help_panel=LOAD,
            help="Override the profile's mean prompt length (its distribution kept): one calibration profile "
            "swept at several prompt lengths, for `plan A.json B.json --prompt-tokens`.",
        ),
    ] = None,
    model: ModelOpt = None,
    seed: Annotated[
        int | None, typer.Option(metavar="N", rich_help_panel=LOAD, help="Override the profile's seed.")
    ] = None,
    sim_mode: Annotated[
        Mode | None, typer.Option(rich_help_panel=TARGET, help="Simulator target only: batching mode.")
    ] = None,
    no_stop: Annotated[
        bool,
        typer.Option(
            "--no-stop",
            metavar="",
            rich_help_panel=LOAD,
            help="Run every level: no early stop on breach or saturation.",
        ),
    ] = False,
    api_key: ApiKeyOpt = None,
    header: HeaderOpt = None,
    timeout: TimeoutOpt = 600.0,
    insecure: InsecureOpt = False,
    transport: TransportOpt = Transport.NATIVE,
    virtual_time: VirtualTimeOpt = False,
    event_loop: EventLoopOpt = EventLoop.AUTO,
    max_event_mib: MaxEventOpt = 4.0,
    request_id_header: RequestIdOpt = "X-Request-Id",
    metric_convention: ConventionOpt = Convention.TOKENS,
    start: StartOpt = Start.STAGGERED,
    retries: RetriesOpt = None,
    workers: WorkersOpt = 1,
    ray: RayOpt = None,
    ray_placement: RayPlacementOpt = Placement.SPREAD,
    ray_num_cpus: RayCpusOpt = 1.0,
    scrape_metrics: ScrapeOpt = Scrape.AUTO,
    output: OutputOpt = Path("sweep.json"),
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Sweep load levels from a profile and write a results file (checkpointed after every level)."""
    from loadgen.cli.session_flags import execute, http_options, progress_observer, ray_options, target_options
    from loadgen.inputs.profile import find_profile, load_profile
    from loadgen.run.assembly import session_from_profile, simulator_options

    for flag, value in (
        ("--duration", duration), ("--warmup", warmup), ("--requests", requests), ("--min-requests", min_requests),
        ("--retries", retries), ("--prompt-tokens", prompt_tokens),
    ):  # fmt: skip
        field_flag(flag, value)
    prof = _with_flags(
        load_profile(find_profile(profile)),
        levels=levels,
        duration=duration,
        warmup=warmup,
        requests=requests,
        min_requests=min_requests,
        retries=retries,
        model=model,
        seed=seed,
        prompt_tokens=prompt_tokens,
        sim_mode=sim_mode,
        no_stop=no_stop,
        batch_sizes=parse_batch_sizes(batch_sizes),
    )
    target = target_options(
        api_key,
        header,
        http_options(timeout, insecure, transport, max_event_mib, request_id_header, event_loop),
        workers,
        ray_options(ray, ray_placement, ray_num_cpus),
        scrape_metrics,
        metric_convention,
        start,
    )
    check_writable(output)
    out = consoles()
    if url is None and prof.url is None and prof.sim is not None:
        out.err.print(f"starting the built-in simulator ({prof.sim.law_text})", highlight=False)
    hooks = sweep_hooks(prof, output, progress_observer(out.err, quiet))
    results = execute(
        url or prof.url,
        simulator_options(prof),
        lambda base_url: session_from_profile(prof, base_url, target),
        lambda _: hooks,
        virtual_time=virtual_time,
    )
    saved = save_results(results, output, out.err)
    capacity = _plan(results, prof)
    render(results, prof.slo, json_out, capacity)
    if saved:
        out.err.print(f"results written to {output}", highlight=False)
    if not results.complete or not saved:
        raise typer.Exit(EXIT_RUN_ERROR)


def _with_flags(
    prof: Profile,
    *,
    levels: str | None,
    duration: float | None,
    warmup: float | None,
    requests: int | None,
    min_requests: int | None,
    retries: int | None,
    model: str | None,
    seed: int | None,
    prompt_tokens: int | None,
    sim_mode: Mode | None,
    no_stop: bool,
    batch_sizes: tuple[int, ...] | None = None,
) -> Profile:
    """The profile as the flags override it (each flag already within its field's bound)."""
    level_values = parse_levels(levels, prof.load.mode)
    prof = prof.with_overrides(
        levels=tuple(int(v) for v in level_values) if level_values and prof.load.mode == "closed" else level_values,
        duration_s=duration,
        warmup_s=warmup,
        requests=requests,
        min_requests=min_requests,
        retries=retries,
        model=model,
        seed=seed,
    )
    if prompt_tokens is not None:
        if prof.workload.dataset is not None:
            raise UsageError(f"--prompt-tokens: profile {prof.name} takes its prompts from a dataset")
        lengths = replace(prof.workload.prompt_tokens, mean=prompt_tokens)
        prof = prof.with_overrides(workload=replace(prof.workload, prompt_tokens=lengths))
    if batch_sizes is not None:
        prof = prof.with_overrides(workload=replace(prof.workload, batch_sizes=batch_sizes))
    if sim_mode is not None:
        if prof.sim is None:
            raise UsageError("--sim-mode: the profile's target is not the built-in simulator")
        prof = prof.with_overrides(sim=replace(prof.sim, mode=sim_mode))
    if no_stop:
        prof = prof.with_overrides(stop=replace(prof.stop, slo_breach_factor=None, stop_on_saturation=False))
    return prof


def sweep_hooks(prof: Profile, output: Path, observer: LevelObserver) -> SessionHooks:
    """Progress, a checkpoint after each level, and the profile's retry and stop rules."""
    from loadgen.results import save_atomic
    from loadgen.run.session import SessionHooks
    from planner.ci.stop import stop_reason
    from planner.evidence.verdicts import retry_reason

    err = consoles().err
    unsaved: list[str] = []

    def checkpoint(partial: Results) -> None:
        """Each finished level is saved at once; a failed save is said once and retried at the next level."""
        try:
            save_atomic(partial, output)
        except OSError as exc:
            if not unsaved:
                err.print(f"warning: -o {output}: checkpoint failed ({exc.strerror}); the sweep goes on")
            unsaved.append(exc.strerror or type(exc).__name__)

    return SessionHooks(
        observer=observer,
        checkpoint=checkpoint,
        retry_policy=lambda level: retry_reason(level, [q for slo in prof.slo if (q := slo.quantity) is not None]),
        stop_policy=lambda done: stop_reason(
            done,
            prof.slo,
            slo_breach_factor=prof.stop.slo_breach_factor,
            stop_on_saturation=prof.stop.stop_on_saturation,
            min_throughput_gain=prof.stop.min_throughput_gain,
        ),
    )


def _plan(results: Results, prof: Profile) -> CapacityPlan | None:
    """The plan's headline, when the profile says what the sweep was for (an SLO): the question ``loadgen plan``
    asks of the saved file, from the profile stored in it (the one ``prof`` became), so the two agree."""
    from loadgen.cli.plan_inputs import PlanFlags, assemble
    from planner import plan as answer

    if not prof.slo or not results.levels or results.pooling:
        return None
    return answer(assemble(PlanFlags(), [("the sweep", results)])).capacity


def render(results: Results, slos: tuple[SloTarget, ...], json_out: bool, capacity: CapacityPlan | None) -> None:
    """The sweep's table, then the plan's decision with every caveat once (or the caveats alone, without a plan)."""
    from loadgen.cli.plan_view import render_decision
    from loadgen.cli.render import rich_section, sweep_table
    from planner.reports.decision import decide
    from planner.reports.per_model import model_section
    from planner.reports.report import caveats, level_verdicts

    out = consoles()
    if json_out:
        doc = {
            "levels": [level.summary() for level in results.levels],
            "plan": capacity.to_json() if capacity else None,
        }
        typer.echo(json.dumps(doc, indent=2))
    else:
        out.out.print(sweep_table(results, slos, level_verdicts(results, capacity, slos)))
        if (models := model_section(results, slos)) is not None:
            out.out.print(*rich_section(models))
    if capacity is not None and not json_out:  # the decision says every caveat, its own and the evidence's
        out.out.print("[bold]plan[/bold] (loadgen plan RESULTS --explain for how it was obtained):")
        for part in render_decision(decide(capacity, caveats(results, None, slos))):
            out.out.print(part)
        return
    for line in caveats(results, capacity, slos):
        out.err.print(f"[yellow]note:[/yellow] {line}", highlight=False)


EXAMPLES = """Examples:

  loadgen sweep --profile quickstart -o sweep.json

  loadgen sweep --profile chat --url http://127.0.0.1:8000/v1 --levels 1,4,16,64 -o chat.json

  loadgen plan sweep.json --slo "tpot_p95<50ms" --qps 40
"""


def register(app: typer.Typer) -> None:
    app.command("sweep", epilog=EXAMPLES)(sweep)
