"""Option types shared by ``run`` and ``sweep`` (typer ``Annotated`` aliases)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar="OPENAI_API_KEY", show_default=False, help="Bearer key (default: $OPENAI_API_KEY). Never stored."
    ),
]
HeaderOpt = Annotated[
    list[str] | None, typer.Option(help="Extra request header NAME:VALUE (repeatable); values are never stored.")
]
TimeoutOpt = Annotated[float, typer.Option(help="Per-request limit, s.")]
InsecureOpt = Annotated[bool, typer.Option(help="Skip TLS verification (self-signed certificates).")]
MaxEventOpt = Annotated[
    float, typer.Option(help="An SSE line or event larger than this (Mi characters) fails its request.")
]
TransportOpt = Annotated[str, typer.Option(help="aiohttp | httpx")]
WorkersOpt = Annotated[int, typer.Option(min=1, help="Worker processes sharing each level.")]
ScrapeOpt = Annotated[str, typer.Option(help="Scrape the server's /metrics: auto | on | off.")]
OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Results file (JSON).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
QuietOpt = Annotated[bool, typer.Option(help="No live progress.")]
ConventionOpt = Annotated[
    str,
    typer.Option(
        help="Which chunks time the stream: tokens (every token event, "
        "empty-content ones included: DESIGN.md) | text (text chunks only)."
    ),
]
StartOpt = Annotated[
    str,
    typer.Option(
        help="Closed loop: staggered (clients spread over about one request) | burst (all at once, as vLLM's "
        "benchmark does; phase-locks clients into cohorts). Recorded in the results."
    ),
]
ModelOpt = Annotated[str | None, typer.Option(help="Model id (default: first from /models).")]
