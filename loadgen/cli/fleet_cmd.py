"""``loadgen plan --variant`` (and ``report --variant``): the fleet plan over traffic, variants and prices.

This module wires: it reads each variant's results, plans it (``planner.capacity.plan``), reads the traffic
(``loadgen.inputs.traffic``) and hands both to ``planner.fleet.fleet_plan``; the math is there.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import UsageError
from loadgen.inputs.traffic import load_traffic, parse_bucket
from loadgen.load import Arrival
from loadgen.results import Results, SloTarget, load
from planner import PlanRequest, plan_from_results
from planner.fleet.demand import Demand, constant_demand, demand_from_arrivals, demand_from_series
from planner.fleet.fleet_plan import FleetPlan, Variant, check_prices, plan_fleet, variant_capacity

_SPEC = "NAME=RESULTS[,cost=USD_PER_GPU_HOUR][,gpus=N]"
_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


def parse_variant(text: str) -> tuple[str, Path, float | None, int]:
    """``NAME=RESULTS[,cost=USD][,gpus=N]`` -> (name, results path, USD per GPU-hour, GPUs per replica)."""
    head, *options = text.split(",")
    name, sep, path = head.partition("=")
    if not sep or not _NAME.match(name.strip()) or not path.strip():
        raise UsageError(f"--variant {text!r}: expected {_SPEC}")
    cost: float | None = None
    gpus = 1
    for option in options:
        key, _, value = option.partition("=")
        try:
            if key.strip() == "cost":
                cost = float(value)
                if not (math.isfinite(cost) and cost >= 0):
                    raise ValueError
            elif key.strip() == "gpus":
                gpus = int(value)
                if gpus < 1:
                    raise ValueError
            else:
                raise UsageError(f"--variant {text!r}: unknown option {key.strip()!r}; expected {_SPEC}")
        except ValueError:
            what = "a price >= 0 in USD per GPU-hour" if key.strip() == "cost" else "a whole number of GPUs >= 1"
            raise UsageError(f"--variant {text!r}: {key.strip()}: expected {what}, got {value!r}") from None
    return name.strip(), Path(path.strip()), cost, gpus


def demand_of(traffic: Path | None, qps: float | None, bucket: str) -> Demand:
    """--traffic FILE bucketed by --bucket, or a constant --qps; exactly one of them."""
    if (traffic is None) == (qps is None):
        raise UsageError("a fleet plan needs the demand: give --traffic FILE or --qps, not both")
    if traffic is None:
        assert qps is not None
        return constant_demand(qps)
    bucket_s = parse_bucket(bucket)
    read = load_traffic(traffic)
    try:
        if read.rates is None:
            return demand_from_arrivals(read.times_s, bucket_s, read.source)
        return demand_from_series(read.times_s, read.rates, bucket_s, read.source)
    except ValueError as exc:
        raise UsageError(f"--traffic {traffic}: {exc}") from None


@dataclass(frozen=True, slots=True)
class VariantFile:
    """One ``--variant``: its name, results (read once) and price."""

    spec: str
    name: str
    path: Path
    results: Results
    cost_per_gpu_hour: float | None
    gpus: int


def read_variants(specs: list[str]) -> list[VariantFile]:
    """Every ``--variant`` parsed and checked (names, prices) before any file is read, then read once each."""
    parsed = [parse_variant(spec) for spec in specs]
    names = [name for name, _, _, _ in parsed]
    if twice := next((n for n in names if names.count(n) > 1), None):
        raise UsageError(f"--variant: the name {twice!r} is given twice")
    try:
        check_prices([cost for _, _, cost, _ in parsed])
    except ValueError as exc:
        raise UsageError(f"--variant: {exc}") from None
    variants = []
    for spec, (name, path, cost, gpus) in zip(specs, parsed):
        results = load(path)
        if not results.levels:
            raise UsageError(f"--variant {spec!r}: {path} has no levels to plan from")
        variants.append(VariantFile(spec, name, path, results, cost, gpus))
    return variants


def fleet_plan(
    variants: list[VariantFile],
    demand: Demand,
    slos: tuple[SloTarget, ...],
    *,
    output_tokens: float | None,
    max_utilization: float,
    scale_up_s: float,
    spare: int,
    mix: bool,
    arrival: Arrival,
    burstiness: float,
    seed: int,
) -> FleetPlan:
    """Each variant planned under ``slos`` and its mu_slo found, then the fleets over ``demand``."""
    capacities = []
    for v in variants:
        request = PlanRequest(
            slos=slos,
            output_tokens=output_tokens,
            max_utilization=max_utilization,
            seed=seed,
            queueing_simulated=True,
        )
        plan = plan_from_results(v.results, request)
        output = output_tokens or (plan.observations.output_tokens_mean if plan.observations else None)
        if not output:
            raise UsageError(f"--variant {v.spec!r}: {v.path} holds no output length; give --output-tokens")
        prompt = plan.prefill.prompt_tokens if plan.prefill else 0.0
        variant = Variant(v.name, plan, output, prompt, str(v.path), v.cost_per_gpu_hour, v.gpus)
        capacities.append(
            variant_capacity(
                variant, slos, max_utilization=max_utilization, arrival=arrival, burstiness=burstiness, seed=seed
            )
        )
    try:
        return plan_fleet(
            demand,
            capacities,
            slos,
            scale_up_s=scale_up_s,
            spare=spare,
            mix=mix,
            max_utilization=max_utilization,
            seed=seed,
        )
    except ValueError as exc:
        raise UsageError(f"--variant: {exc}") from None
