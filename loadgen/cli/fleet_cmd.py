"""``loadgen plan --variant`` (and ``report --variant``): a fleet's variants and demand, read and checked.

This module reads: each variant's results and price, and the traffic (``loadgen.inputs.traffic``); the
planner's front door plans each variant and the fleet (``planner.front_door``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.errors import UsageError

if TYPE_CHECKING:
    from planner.fleet.demand import Demand
    from planner.front_door import FleetVariant

_SPEC = "NAME=RESULTS[,cost=USD_PER_GPU_HOUR][,gpus=N]"
MAX_PRICE = 1e6  # USD per GPU-hour: past it the figure is a typo, and a cost of 1e308 printed "$inf"
MAX_GPUS = 4096  # GPUs one replica spans
_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


def parse_variant(text: str) -> tuple[str, Path, float | None, int]:
    """``NAME=RESULTS[,cost=USD][,gpus=N]`` -> (name, results path, USD per GPU-hour, GPUs per replica)."""
    head, *options = text.split(",")
    name, sep, path = head.partition("=")
    if not sep or not _NAME.match(name.strip()) or not path.strip():
        raise UsageError(f"--variant {text!r}: expected {_SPEC}")
    cost: float | None = None
    gpus = 1
    keys = [option.partition("=")[0].strip() for option in options]
    if twice := next((k for k in keys if keys.count(k) > 1), None):
        raise UsageError(f"--variant {text!r}: {twice} is given twice; expected {_SPEC}")
    for option in options:
        key, _, value = option.partition("=")
        try:
            if key.strip() == "cost":
                cost = float(value)
                if not (math.isfinite(cost) and 0 <= cost <= MAX_PRICE):
                    raise ValueError
            elif key.strip() == "gpus":
                gpus = int(value)
                if not 1 <= gpus <= MAX_GPUS:
                    raise ValueError
            else:
                raise UsageError(f"--variant {text!r}: unknown option {key.strip()!r}; expected {_SPEC}")
        except ValueError:
            what = (
                f"a price from 0 to {MAX_PRICE:,.0f} USD per GPU-hour"
                if key.strip() == "cost"
                else f"a whole number of GPUs from 1 to {MAX_GPUS}"
            )
            raise UsageError(f"--variant {text!r}: {key.strip()}: expected {what}, got {value!r}") from None
    return name.strip(), Path(path.strip()), cost, gpus


def demand_of(traffic: Path | None, qps: float | None, bucket: str) -> Demand:
    """--traffic FILE bucketed by --bucket, or a constant --qps; exactly one of them."""
    from loadgen.inputs.traffic import load_traffic, parse_bucket
    from planner.fleet.demand import constant_demand, demand_from_arrivals, demand_from_series

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


def read_variants(specs: list[str]) -> list[FleetVariant]:
    """Every ``--variant`` parsed and checked (names, prices) before any file is read, then read once each."""
    from loadgen.results import load
    from planner.fleet.fleet_plan import check_prices
    from planner.front_door import FleetVariant

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
        variants.append(
            FleetVariant(name=name, spec=spec, source=str(path), results=results, cost_per_gpu_hour=cost, gpus=gpus)
        )
    return variants
