"""Sweeps: a profile's levels run in order, with an early-stop policy.

The policy is a pure function of the levels measured so far: stop once a
level breaches an SLO by ``slo_breach_factor`` (the curve past it only costs
time), or once throughput stops rising (a level gaining less than
``min_throughput_gain`` over the previous one is saturated: the server is at
its maximum batch and more clients only queue).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadgen.client import HttpOptions
from loadgen.profile import LengthSpec, Profile, StopSpec
from loadgen.results import LevelResult, Load, SloTarget
from loadgen.runner import LevelPlan
from loadgen.session import Scrape, Session
from loadgen.workload import Lengths, Workload, load_dataset


def throughput_gain(previous: LevelResult, current: LevelResult) -> float | None:
    """Relative change in output tokens/s from one level to the next (None without data)."""
    a, b = previous.output_tokens_per_s, current.output_tokens_per_s
    if not a or b is None:
        return None
    return b / a - 1.0


def saturated_flags(levels: Sequence[LevelResult], min_gain: float | None) -> list[bool]:
    """Per level: did it gain less than ``min_gain`` throughput over the level before?"""
    flags = [False]
    for prev, cur in zip(levels, levels[1:]):
        gain = throughput_gain(prev, cur)
        flags.append(min_gain is not None and gain is not None and gain < min_gain)
    return flags[: len(levels)]


def slo_breaches(level: LevelResult, slos: Sequence[SloTarget]) -> list[SloTarget]:
    return [s for s in slos if s.met_by(level) is False]


def stop_reason(levels: Sequence[LevelResult], slos: Sequence[SloTarget], stop: StopSpec) -> str | None:
    """Why the sweep should stop after the last level, or None to go on."""
    if not levels:
        return None
    last = levels[-1]
    if stop.slo_breach_factor is not None:
        for slo in slos:
            value = slo.value(last)
            if value is not None and value > slo.limit * stop.slo_breach_factor:
                return (f"stopped after {last.load.label}: {slo.key} = {value:.4g} breaches the SLO "
                        f"({slo.limit:g}) by more than {stop.slo_breach_factor:g}x")
    if stop.stop_on_saturation and len(levels) >= 2 and saturated_flags(levels, stop.min_throughput_gain)[-1]:
        gain = throughput_gain(levels[-2], last)
        return (f"stopped after {last.load.label}: saturated (throughput {gain:+.1%} over "
                f"{levels[-2].load.label}, less than {stop.min_throughput_gain:.0%})")
    return None


@dataclass(frozen=True, slots=True)
class TargetOptions:
    """How to reach the endpoint (flags only: never in a profile on disk, except headers)."""

    api_key: str | None = None
    headers: Mapping[str, str] | None = None
    http: HttpOptions = HttpOptions()
    workers: int = 1
    scrape: Scrape = "auto"


def _lengths(spec: LengthSpec) -> Lengths:
    return Lengths(spec.mean, spec.dist, spec.spread)  # type: ignore[arg-type]


def session_from_profile(profile: Profile, base_url: str, target: TargetOptions) -> Session:
    """The levels and workload of a profile, aimed at ``base_url``."""
    w, ld = profile.workload, profile.load
    workload = Workload(
        api=profile.api,  # type: ignore[arg-type]
        model=profile.model or "",
        prompt_tokens=_lengths(w.prompt_tokens),
        output_tokens=_lengths(w.output_tokens),
        dataset=load_dataset(Path(w.dataset)) if w.dataset else None,
        unique_prompts=not w.shared_prefix,
        extra_body=dict(profile.extra_body),
    )
    plans = []
    goodput = tuple((s.metric, s.limit) for s in profile.slo if s.metric is not None)
    for i, value in enumerate(ld.levels):
        load = (Load("concurrency", int(value)) if ld.mode == "closed"
                else Load("rate", float(value), ld.arrival, ld.burstiness, ld.max_in_flight))
        plans.append(LevelPlan(load, duration_s=ld.duration_s, requests=ld.requests, warmup_s=ld.warmup_s,
                               timeout_s=target.http.timeout_s, seed=profile.seed + i, goodput_limits_ms=goodput))
    headers = {**profile.headers, **(target.headers or {})}
    return Session(
        base_url=base_url, workload=workload, levels=tuple(plans), api_key=target.api_key, headers=headers,
        http=target.http, workers=target.workers, scrape=target.scrape, auto_ramp=ld.mode == "closed",
        command="sweep", extra_settings={"profile": profile.to_json()},
    )
