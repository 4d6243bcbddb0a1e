"""Option types shared by ``plan`` and ``report`` (typer ``Annotated`` aliases): one declaration, one help text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

MIX = "Plan for a mix not measured (several RESULTS)"
FLEET = "Fleet plan (--variant)"

PredictLevelsOpt = Annotated[
    str | None,
    typer.Option(
        metavar="C,C,...",
        rich_help_panel=MIX,
        help="The sweep not run, predicted: each closed-loop concurrency at the mix, served by the fitted engine "
        "in the simulator in virtual time (batch capped at --current-batch).",
    ),
]
CurrentBatchOpt = Annotated[int | None, typer.Option(metavar="N", help="The batch cap (--max-num-seqs) in use now.")]
MaxNumBatchedTokensOpt = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        rich_help_panel=MIX,
        help="The calibration server's token budget per step (vLLM's --max-num-batched-tokens; its results do not "
        "hold it): a prompt longer than it prefills in chunks.",
    ),
]
KvCapacityOpt = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        rich_help_panel=MIX,
        help="The server's KV cache in tokens (vLLM logs 'GPU KV cache size: N tokens' at start; its results do "
        "not hold it): the batch is capped at the sequences it holds whole, prompt and answer.",
    ),
]
VariantOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="NAME=RESULTS[,cost=USD][,gpus=N]",
        rich_help_panel=FLEET,
        help="One way to serve the model (repeatable): a results file of `sweep` or `loadgen import`, its price "
        "in USD per GPU-hour and GPUs per replica. Plans the cheapest fleet over --traffic (or --qps).",
    ),
]
TrafficOpt = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        rich_help_panel=FLEET,
        help="Demand over time: a CSV rate series (time_s,qps) or a trace of arrivals (as `run --trace` reads).",
    ),
]
BucketOpt = Annotated[
    str, typer.Option(metavar="DURATION", rich_help_panel=FLEET, help="Bucket of --traffic, e.g. 60s, 5m, 1h.")
]
ScaleUpOpt = Annotated[
    float,
    typer.Option(metavar="SECONDS", rich_help_panel=FLEET, help="A replica asked for at t serves from t + SECONDS."),
]
SpareOpt = Annotated[
    int,
    typer.Option(
        metavar="N", rich_help_panel=FLEET, help="Spare replicas in every bucket (N+1 style), never counted on."
    ),
]
MixOpt = Annotated[
    bool,
    typer.Option(
        "--mix",
        metavar="",
        rich_help_panel=FLEET,
        help="Also try every pair of variants: the counts of each that cost least over the period, lag and spares paid.",
    ),
]
