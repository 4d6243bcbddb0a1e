"""Option types shared by ``run`` and ``sweep`` (typer ``Annotated`` aliases)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from loadgen.choices import EventLoop, Placement, Scrape, Start, Transport
from loadgen.wire.sse import Convention

# --help panels: ``run`` has about 40 flags; grouped, a user finds the one they need.
LOAD = "Load"
WORKLOAD = "Workload"
TARGET = "Target"
MEASURE = "Measurement"
OUTPUT = "Output"

ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar="OPENAI_API_KEY",
        show_default=False,
        metavar="KEY",
        rich_help_panel=TARGET,
        help="Bearer key (default: $OPENAI_API_KEY). Never stored.",
    ),
]
HeaderOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="NAME:VALUE",
        rich_help_panel=TARGET,
        help="Extra request header (repeatable); values are never stored.",
    ),
]
TimeoutOpt = Annotated[float, typer.Option(metavar="SECONDS", rich_help_panel=TARGET, help="Per-request limit.")]
InsecureOpt = Annotated[
    bool,
    typer.Option(
        "--insecure", metavar="", rich_help_panel=TARGET, help="Skip TLS verification (self-signed certificates)."
    ),
]
MaxEventOpt = Annotated[
    float,
    typer.Option(
        metavar="MIB",
        rich_help_panel=TARGET,
        help="An SSE line or event larger than this (Mi characters) fails its request.",
    ),
]
RequestIdOpt = Annotated[
    str,
    typer.Option(
        metavar="NAME",
        rich_help_panel=TARGET,
        help="Send a fresh id per request in this header, recorded in --records beside the response's own "
        "id, to find a request in the server's logs ('' sends none).",
    ),
]
DurationOpt = Annotated[
    float | None,
    typer.Option(metavar="SECONDS", rich_help_panel=LOAD, help="Override the measured duration per level."),
]
WarmupOpt = Annotated[
    float | None, typer.Option(metavar="SECONDS", rich_help_panel=LOAD, help="Override the warm-up per level.")
]
TransportOpt = Annotated[
    Transport,
    typer.Option(
        rich_help_panel=TARGET,
        help="HTTP stack for the streams: native (llhttp on asyncio; the cheapest, most exact and the one "
        "whose bounds against hostile servers are tested: use it), aiohttp's pool under httpx's API (reuses "
        "connections a server closed while idle, holds an endless 1xx answer until --timeout), or httpx's own "
        "(collapses past ~64 streams). native ignores HTTP(S)_PROXY.",
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(min=1, metavar="N", rich_help_panel=LOAD, help="Worker processes (or Ray actors) sharing each level."),
]
RAY = "Distributed (Ray)"
RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="local|auto|ADDRESS",
        rich_help_panel=RAY,
        help="Run the --workers as Ray actors: local (a Ray instance started here), auto (the cluster this host "
        "joined with ray start), or ray://HOST:PORT. Needs the ray extra: pip install 'loadgen\\[ray]'.",
    ),
]
RayPlacementOpt = Annotated[
    Placement,
    typer.Option(rich_help_panel=RAY, help="--ray: spread the actors over nodes, or pack them."),
]
RayCpusOpt = Annotated[float, typer.Option(metavar="N", rich_help_panel=RAY, help="--ray: CPUs reserved per actor.")]
ScrapeOpt = Annotated[Scrape, typer.Option(rich_help_panel=MEASURE, help="Scrape the server's /metrics.")]
OutputOpt = Annotated[
    Path, typer.Option("--output", "-o", metavar="FILE", rich_help_panel=OUTPUT, help="Results file (JSON).")
]
JsonOpt = Annotated[
    bool, typer.Option("--json", metavar="", rich_help_panel=OUTPUT, help="Print machine-readable JSON on stdout.")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", metavar="", rich_help_panel=OUTPUT, help="No live progress.")]
ConventionOpt = Annotated[
    Convention,
    typer.Option(
        rich_help_panel=MEASURE,
        help="Which chunks time the stream: tokens (every token event, "
        "empty-content ones included: docs/measuring.md) | text (text chunks only).",
    ),
]
RetriesOpt = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        rich_help_panel=LOAD,
        help="Measure a level again, up to N times, when the measurement made it untrusted (client-bound, too "
        "few samples, a short or unsettled window); never for the service's own errors or overload. Every "
        "attempt is kept in the results.",
    ),
]
StartOpt = Annotated[
    Start,
    typer.Option(
        rich_help_panel=LOAD,
        help="Closed loop: staggered (clients spread over about one request) | burst (all at once, as vLLM's "
        "benchmark does; phase-locks clients into cohorts). Recorded in the results.",
    ),
]
ModelOpt = Annotated[
    str | None, typer.Option(metavar="ID", rich_help_panel=TARGET, help="Model id (default: first from /models).")
]
VirtualTimeOpt = Annotated[
    bool,
    typer.Option(
        "--virtual-time",
        metavar="",
        rich_help_panel=TARGET,
        help="Simulator only: run it in this process on a virtual clock. Minutes of load take seconds and "
        "measure the simulator's law exactly (no client cost, no network): try a profile, a plan or a gate "
        "before real hardware.",
    ),
]
EventLoopOpt = Annotated[
    EventLoop,
    typer.Option(
        rich_help_panel=TARGET,
        help="Event loop for the streams: uvloop (C, about 10% less CPU per token here) where installed, "
        "else asyncio's own. The results record which ran.",
    ),
]
