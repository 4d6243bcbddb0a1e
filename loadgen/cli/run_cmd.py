"""``loadgen run``: one load level against one endpoint, exact metrics, a results file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadgen.api import Api
from loadgen.choices import (
    DRAWN_ARRIVALS,
    MOONCAKE_BLOCK_TOKENS,
    Arrival,
    EventLoop,
    LengthDist,
    LoadMode,
    Placement,
    Scrape,
    Start,
    Transport,
)
from loadgen.cli.bounds import bounded, field_flag
from loadgen.cli.common import EXIT_RUN_ERROR, check_writable, choice, consoles, friendly_errors, save_results
from loadgen.cli.options import (
    LOAD,
    MEASURE,
    OUTPUT,
    TARGET,
    WORKLOAD,
    ApiKeyOpt,
    ConventionOpt,
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
    WorkersOpt,
)
from loadgen.errors import UsageError
from loadgen.inputs.workload import DatasetFormat
from loadgen.quantity import Metric
from loadgen.wire.sse import Convention

if TYPE_CHECKING:
    from loadgen.inputs.images import ImageSpec
    from loadgen.inputs.model_mix import ModelMix
    from loadgen.inputs.profile import LoadSpec
    from loadgen.results import Results


@friendly_errors
def run(
    url: Annotated[
        str,
        typer.Option(
            envvar="OPENAI_BASE_URL",
            metavar="URL",
            rich_help_panel=TARGET,
            help="Base URL of the OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1 (default: "
            "$OPENAI_BASE_URL); 'sim' starts the built-in simulator.",
        ),
    ],
    concurrency: Annotated[
        int | None, typer.Option(metavar="N", rich_help_panel=LOAD, help="Closed loop: number of concurrent clients.")
    ] = None,
    rate: Annotated[
        float | None, typer.Option(metavar="PER_S", rich_help_panel=LOAD, help="Open loop: requests per second.")
    ] = None,
    arrival: Annotated[
        str, typer.Option(metavar="|".join(DRAWN_ARRIVALS), rich_help_panel=LOAD, help="Open loop arrivals.")
    ] = Arrival.POISSON,
    burstiness: Annotated[
        float, typer.Option(metavar="K", rich_help_panel=LOAD, help="Gamma shape (1 = Poisson, < 1 burstier).")
    ] = 1.0,
    max_in_flight: Annotated[
        int | None, typer.Option(metavar="N", rich_help_panel=LOAD, help="Open loop: cap on requests in flight.")
    ] = None,
    duration: Annotated[
        float | None, typer.Option(metavar="SECONDS", rich_help_panel=LOAD, help="Measured duration after warm-up.")
    ] = None,
    requests: Annotated[
        int | None, typer.Option(metavar="N", rich_help_panel=LOAD, help="Request budget (warm-up included).")
    ] = None,
    warmup: Annotated[
        float, typer.Option(metavar="SECONDS", rich_help_panel=LOAD, help="Warm-up excluded from the measurement.")
    ] = 0.0,
    ramp_up: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            rich_help_panel=LOAD,
            help="Closed loop: start clients staggered over this span (default: one probe request's duration).",
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            rich_help_panel=LOAD,
            help="Replay a request trace in open loop at its recorded times, each request with its recorded "
            "prompt and output lengths (loadgen, Mooncake or Azure format; see docs/measuring.md).",
        ),
    ] = None,
    time_scale: Annotated[
        float,
        typer.Option(
            metavar="S", rich_help_panel=LOAD, help="--trace: multiply the recorded gaps (0.5 = twice as fast)."
        ),
    ] = 1.0,
    trace_block_tokens: Annotated[
        int,
        typer.Option(
            metavar="N",
            rich_help_panel=LOAD,
            help="--trace: the tokens each of the trace's hash_ids names (Mooncake's traces: 512).",
        ),
    ] = MOONCAKE_BLOCK_TOKENS,
    start: StartOpt = Start.STAGGERED,
    retries: RetriesOpt = None,
    workers: WorkersOpt = 1,
    ray: RayOpt = None,
    ray_placement: RayPlacementOpt = Placement.SPREAD,
    ray_num_cpus: RayCpusOpt = 1.0,
    seed: Annotated[
        int, typer.Option(metavar="N", rich_help_panel=LOAD, help="Seed for prompts, lengths and arrivals.")
    ] = 0,
    api: Annotated[Api, typer.Option(rich_help_panel=TARGET, help="Which API.")] = Api.CHAT,
    model: ModelOpt = None,
    api_key: ApiKeyOpt = None,
    header: HeaderOpt = None,
    timeout: TimeoutOpt = 600.0,
    insecure: InsecureOpt = False,
    transport: TransportOpt = Transport.NATIVE,
    virtual_time: VirtualTimeOpt = False,
    event_loop: EventLoopOpt = EventLoop.AUTO,
    max_event_mib: MaxEventOpt = 4.0,
    request_id_header: RequestIdOpt = "X-Request-Id",
    prompt_tokens: Annotated[
        int, typer.Option(metavar="N", rich_help_panel=WORKLOAD, help="Synthetic prompt length, tokens.")
    ] = 128,
    prompt_dist: Annotated[
        LengthDist, typer.Option(rich_help_panel=WORKLOAD, help="How prompt lengths spread around --prompt-tokens.")
    ] = LengthDist.FIXED,
    prompt_spread: Annotated[
        float, typer.Option(metavar="CV", rich_help_panel=WORKLOAD, help="Relative spread of the prompt length.")
    ] = 0.0,
    dataset: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            rich_help_panel=WORKLOAD,
            help='Prompts from a file: ShareGPT JSON, OpenAI chat JSONL, or JSONL of {"prompt": ...}; '
            "visited in an order drawn from --seed.",
        ),
    ] = None,
    dataset_format: Annotated[
        DatasetFormat, typer.Option(rich_help_panel=WORKLOAD, help="How to read --dataset.")
    ] = DatasetFormat.AUTO,
    dataset_max_words: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            rich_help_panel=WORKLOAD,
            help="Drop dataset entries whose prompt and recorded answer exceed N words (too long for the context).",
        ),
    ] = None,
    output_from_dataset: Annotated[
        bool,
        typer.Option(
            "--output-from-dataset",
            metavar="",
            rich_help_panel=WORKLOAD,
            help="max_tokens = each prompt's recorded answer length (ShareGPT answers, chat lines ending with "
            "the assistant's message); --max-tokens where there is none.",
        ),
    ] = False,
    shared_prompts: Annotated[
        bool,
        typer.Option(
            "--shared-prompts",
            metavar="",
            rich_help_panel=WORKLOAD,
            help="Let prompts share prefixes (default: unique per request).",
        ),
    ] = False,
    max_tokens: Annotated[
        int, typer.Option(metavar="N", rich_help_panel=WORKLOAD, help="Output tokens per request (max_tokens).")
    ] = 128,
    output_dist: Annotated[
        LengthDist, typer.Option(rich_help_panel=WORKLOAD, help="How output lengths spread around --max-tokens.")
    ] = LengthDist.FIXED,
    output_spread: Annotated[
        float, typer.Option(metavar="CV", rich_help_panel=WORKLOAD, help="Relative spread of the output length.")
    ] = 0.0,
    turns: Annotated[
        int,
        typer.Option(
            metavar="N",
            rich_help_panel=WORKLOAD,
            help="Closed-loop chat: turns per conversation; each turn sends the whole history back "
            "(TTFT is reported per turn).",
        ),
    ] = 1,
    think_time: Annotated[
        float,
        typer.Option(metavar="SECONDS", rich_help_panel=WORKLOAD, help="Mean pause between a conversation's turns."),
    ] = 0.0,
    models: Annotated[
        str | None,
        typer.Option(
            metavar="NAME[=W],...",
            rich_help_panel=TARGET,
            help="Split requests over several models (LoRA adapters of one endpoint): 'sql=70,chat=20,base=10' "
            "by weight, or 'a,b,c' evenly (or ranked: --models-zipf). Results break down per model.",
        ),
    ] = None,
    models_zipf: Annotated[
        float | None,
        typer.Option(
            metavar="S", rich_help_panel=TARGET, help="--models a,b,c: the k-th name gets 1/k^S of the requests."
        ),
    ] = None,
    images: Annotated[
        int,
        typer.Option(
            metavar="N",
            rich_help_panel=WORKLOAD,
            help="Chat, responses: images in each request's message, generated (distinct, seeded PNGs) or from "
            "--images-folder.",
        ),
    ] = 0,
    image_size: Annotated[
        str,
        typer.Option(metavar="WxH", rich_help_panel=WORKLOAD, help="--images: each generated image's size in pixels."),
    ] = "512x512",
    images_folder: Annotated[
        Path | None,
        typer.Option(metavar="DIR", rich_help_panel=WORKLOAD, help="--images: send the image files of this folder."),
    ] = None,
    batch: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            rich_help_panel=WORKLOAD,
            help="Embeddings, rerank: inputs (documents) per request, each --prompt-tokens long (default 1).",
        ),
    ] = None,
    extra_body: Annotated[
        str | None,
        typer.Option(
            metavar="JSON",
            rich_help_panel=WORKLOAD,
            help="JSON merged into every request body, e.g. '{\"ignore_eos\": true}' for vLLM.",
        ),
    ] = None,
    metric_convention: ConventionOpt = Convention.TOKENS,
    scrape_metrics: ScrapeOpt = Scrape.AUTO,
    lag_threshold_ms: Annotated[
        float,
        typer.Option(metavar="MS", rich_help_panel=MEASURE, help="p99 generator lag that flags a level client-bound."),
    ] = 10.0,
    output: OutputOpt = Path("results.json"),
    records: Annotated[
        Path | None,
        typer.Option(metavar="FILE", rich_help_panel=OUTPUT, help="Also write one raw record per request (JSONL)."),
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run one load level and write a results file."""
    from loadgen.cli.records_hooks import RecordsHooks
    from loadgen.cli.session_flags import (
        execute,
        http_options,
        parse_extra_body,
        progress_observer,
        ray_options,
        target_options,
    )
    from loadgen.engine import EngineConfig
    from loadgen.inputs.profile import LoadSpec, Profile, WorkloadSpec
    from loadgen.inputs.profile_rules import broken_rules
    from loadgen.lengths import Lengths
    from loadgen.run.assembly import session_from_profile, simulator_options
    from loadgen.run.launch import SIM_URL

    for flag, value in (
        ("--concurrency", concurrency), ("--rate", rate), ("--burstiness", burstiness),
        ("--max-in-flight", max_in_flight), ("--duration", duration), ("--requests", requests), ("--warmup", warmup),
        ("--ramp-up", ramp_up), ("--prompt-tokens", prompt_tokens), ("--prompt-spread", prompt_spread),
        ("--max-tokens", max_tokens), ("--output-spread", output_spread), ("--turns", turns),
        ("--dataset-max-words", dataset_max_words), ("--think-time", think_time), ("--retries", retries),
        ("--batch", batch),
    ):  # fmt: skip
        field_flag(flag, value)
    bounded("--lag-threshold-ms", lag_threshold_ms, minimum=0, exclusive=True)
    if start == "burst" and ramp_up:
        raise UsageError("--start burst starts every client at once; it takes no --ramp-up")
    if trace is not None:
        _trace_takes_no(concurrency, rate, duration, dataset)
        field_flag("--time-scale", time_scale)
        field_flag("--trace-block-tokens", trace_block_tokens)
        load = LoadSpec(mode=LoadMode.TRACE, levels=(time_scale,), duration_s=None, requests=requests, warmup_s=warmup,
                        max_in_flight=max_in_flight, trace=str(trace),
                        trace_block_tokens=trace_block_tokens)  # fmt: skip
    else:
        load = _load(concurrency, rate, arrival, burstiness, max_in_flight, duration, requests, warmup, ramp_up)
    if records is not None and (workers > 1 or ray is not None):
        raise UsageError("--records works with one worker process only (no --workers, no --ray)")
    load = replace(load, retries=retries or 0)
    on_sim = url == SIM_URL
    mix = _model_mix(models, models_zipf, model)
    profile = Profile(
        name="run",
        url=None if on_sim else url,
        sim=EngineConfig() if on_sim else None,
        api=api,
        model=model,
        models=mix,
        extra_body=parse_extra_body(extra_body),
        workload=WorkloadSpec(
            prompt_tokens=Lengths(prompt_tokens, prompt_dist, prompt_spread),
            output_tokens=Lengths(max_tokens, output_dist, output_spread),
            dataset=str(dataset) if dataset else None,
            dataset_format=dataset_format,
            dataset_max_words=dataset_max_words,
            output_from_dataset=output_from_dataset,
            turns=turns,
            think_time_s=think_time,
            shared_prefix=shared_prompts,
            images=_images(images, image_size, images_folder),
            batch_sizes=(batch,) if batch is not None else (1,),
        ),
        load=load,
        seed=seed,
    )
    if (broken := next(broken_rules(profile), None)) is not None:
        raise UsageError(broken.said("flags"))
    target = target_options(
        api_key,
        header,
        http_options(timeout, insecure, transport, max_event_mib, request_id_header, event_loop),
        workers,
        ray_options(ray, ray_placement, ray_num_cpus),
        scrape_metrics,
        metric_convention,
        start,
        lag_threshold_ms=lag_threshold_ms,
    )
    check_writable(output)
    if records is not None:
        check_writable(records, "--records")
    out = consoles()
    progress = progress_observer(out.err, quiet)
    with RecordsHooks(records, progress) as hooks:
        result = execute(
            url,
            simulator_options(profile),
            lambda base_url: session_from_profile(profile, base_url, target, command="run"),
            hooks.for_session,
            virtual_time=virtual_time,
        )
    saved = save_results(result, output, out.err)
    _report(result, json_out, time_scale if trace is not None else None)
    if hooks.failed:
        out.err.print(
            f"error: --records {records}: writing stopped ({hooks.failed}); the results are whole", highlight=False
        )
    if saved:
        out.err.print(f"results written to {output}", highlight=False)
    if not result.complete or result.levels[0].completed == 0 or not saved or hooks.failed:
        raise typer.Exit(EXIT_RUN_ERROR)  # interrupted, nothing measured, or not all saved: never a silent success


def _report(result: Results, json_out: bool, time_scale: float | None) -> None:
    """The level's tables (or its JSON summary), its notes, and for a trace how late the sends were."""
    from loadgen.cli.render import level_table, rich_section, throughput_table
    from planner.reports.per_model import model_section
    from planner.reports.report import caveats

    out = consoles()
    level = result.levels[0]
    if json_out:
        typer.echo(json.dumps(level.summary(), indent=2))
    else:
        out.out.print(level_table(level))
        out.out.print(throughput_table(level))
        if (models := model_section(result)) is not None:
            out.out.print(*rich_section(models))
    for line in caveats(result):
        out.err.print(f"[yellow]note:[/yellow] {line}", highlight=False)
    if time_scale is not None:
        replayed = result.settings.trace
        assert replayed is not None  # a trace run stores what it replayed
        late = level.percentile_ms(Metric.LAG, 99)
        out.err.print(
            f"trace replay: {replayed['requests']} requests scheduled over {replayed['span_s'] * time_scale:.1f} s "
            f"({replayed['format']} format, time scale {time_scale:g}); sends were late by at most "
            f"{level.histograms[Metric.LAG].max_us() or 0:,} us (p99 {late if late is not None else 0:.2f} ms)",
            highlight=False,
        )


def _model_mix(models: str | None, zipf: float | None, model: str | None) -> ModelMix | None:
    """``--models`` (and ``--models-zipf``) as a profile's ``models`` (None: every request names ``--model``)."""
    from loadgen.inputs.model_mix import parse_model_mix

    if models is None:
        if zipf is not None:
            raise UsageError("--models-zipf ranks the names of --models; give them")
        return None
    if model is not None:
        raise UsageError("--models splits requests over several models: no --model beside it")
    try:
        return parse_model_mix(models, zipf)
    except ValueError as exc:
        raise UsageError(f"--models {models}: {exc}") from None


def _images(count: int, size: str, folder: Path | None) -> ImageSpec | None:
    """The images flags as a workload's ``images`` (None without ``--images``)."""
    from loadgen.inputs.images import ImageSpec

    if count == 0:
        if folder is not None or size != "512x512":
            raise UsageError("--image-size and --images-folder shape the images of --images N; give it")
        return None
    width, _, height = size.lower().partition("x")
    if not (width.isdigit() and height.isdigit()):
        raise UsageError(f"--image-size {size}: expected WIDTHxHEIGHT in pixels, e.g. 512x512")
    if folder is not None and not folder.is_dir():
        raise UsageError(f"--images-folder {folder}: not a folder")
    try:
        return ImageSpec(
            count=count, width=int(width), height=int(height), folder=str(folder) if folder is not None else None
        )
    except ValueError as exc:
        raise UsageError(f"--images {count} --image-size {size}: {exc}") from None


def _trace_takes_no(concurrency: int | None, rate: float | None, duration: float | None, dataset: Path | None) -> None:
    """Refuse flags that would contradict a trace, which sets the arrivals, lengths and span (that one process
    replays it is the session assembly's check, shared with trace profiles)."""
    for flag, given in (("--concurrency", concurrency), ("--rate", rate), ("--duration", duration),
                        ("--dataset", dataset)):  # fmt: skip
        if given is not None:
            raise UsageError(f"--trace sets the arrivals, lengths and span: it takes no {flag}")


def _load(
    concurrency: int | None,
    rate: float | None,
    arrival: str,
    burstiness: float,
    max_in_flight: int | None,
    duration: float | None,
    requests: int | None,
    warmup: float,
    ramp_up: float | None,
) -> LoadSpec:
    """The one level the flags ask for: closed loop (--concurrency) or open loop (--rate)."""
    from loadgen.inputs.profile import LoadSpec

    if (concurrency is None) == (rate is None):
        raise UsageError("give exactly one of --concurrency (closed loop) or --rate (open loop)")
    if duration is None and requests is None:
        raise UsageError("give --duration and/or --requests to bound the level")
    if concurrency is not None:
        return LoadSpec(
            mode=LoadMode.CLOSED, levels=(concurrency,), duration_s=duration, requests=requests, warmup_s=warmup,
            ramp_up_s=ramp_up,
        )  # fmt: skip
    assert rate is not None
    return LoadSpec(
        mode=LoadMode.OPEN, levels=(rate,), duration_s=duration, requests=requests, warmup_s=warmup,
        arrival=choice("--arrival", arrival, DRAWN_ARRIVALS), burstiness=burstiness, max_in_flight=max_in_flight,
    )  # fmt: skip


EXAMPLES = """Examples:

  loadgen run --url sim --concurrency 8 --duration 20 -o results.json

  loadgen run --url http://127.0.0.1:8000/v1 --concurrency 32 --duration 60 --warmup 10 --max-tokens 200 --extra-body '{"ignore_eos": true}'

  loadgen run --url http://127.0.0.1:8000/v1 --rate 20 --arrival gamma --burstiness 0.5 --duration 60
"""


def register(app: typer.Typer) -> None:
    app.command("run", epilog=EXAMPLES)(run)
