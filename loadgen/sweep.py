"""Sweeps: a profile's levels, aimed at a target, as one session.

The early-stop policy is the planner's (``planner.stop``), wired in by the
CLI, so a level is saturated by the same verdict everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.client import HttpOptions
from loadgen.errors import UsageError
from loadgen.profile import LengthSpec, Profile
from loadgen.quantity import PER_REQUEST
from loadgen.ray_workers import RayOptions
from loadgen.results import Load
from loadgen.runner import LevelPlan
from loadgen.session import Scrape, Session, Start
from loadgen.sse import Convention
from loadgen.workload import Lengths, Workload, load_dataset


@dataclass(frozen=True, slots=True)
class TargetOptions:
    """How to reach the endpoint (flags only: never in a profile on disk, except headers)."""

    api_key: str | None = None
    headers: Mapping[str, str] | None = None
    http: HttpOptions = field(default_factory=HttpOptions)
    workers: int = 1
    ray: RayOptions | None = None
    scrape: Scrape = "auto"
    metric_convention: Convention = "tokens"
    start: Start = "staggered"


def _lengths(spec: LengthSpec) -> Lengths:
    return Lengths(spec.mean, spec.dist, spec.spread)


def session_from_profile(profile: Profile, base_url: str, target: TargetOptions) -> Session:
    """The levels and workload of a profile, aimed at ``base_url``."""
    w, ld = profile.workload, profile.load
    if w.turns > 1 and (ld.mode != "closed" or profile.api != "chat"):
        raise UsageError(
            f"{profile.name}: workload.turns runs closed-loop chat conversations (load.mode closed, api chat)"
        )
    workload = Workload(
        api=profile.api,
        model=profile.model or "",
        prompt_tokens=_lengths(w.prompt_tokens),
        output_tokens=_lengths(w.output_tokens),
        dataset=load_dataset(Path(w.dataset), w.dataset_format, w.dataset_max_words) if w.dataset else None,
        output_from_dataset=w.output_from_dataset,
        turns=w.turns,
        think_time_s=w.think_time_s,
        unique_prompts=not w.shared_prefix,
        extra_body=dict(profile.extra_body),
        metric_convention=target.metric_convention,
    )
    plans = []
    floor = ld.min_requests or max((s.samples_needed for s in profile.slo if s.metric in PER_REQUEST), default=None)
    goodput = tuple((s.metric, s.limit) for s in profile.slo if s.metric is not None)
    for i, value in enumerate(ld.levels):
        load = (
            Load("concurrency", int(value))
            if ld.mode == "closed"
            else Load("rate", float(value), ld.arrival, ld.burstiness, ld.max_in_flight)
        )
        plans.append(
            LevelPlan(
                load,
                duration_s=ld.duration_s,
                requests=ld.requests,
                warmup_s=ld.warmup_s,
                timeout_s=target.http.timeout_s,
                max_event_chars=target.http.max_event_chars,
                request_id_header=target.http.request_id_header,
                seed=profile.seed + i,
                goodput_limits_ms=goodput,
                min_requests=floor,
            )
        )
    headers = {**profile.headers, **(target.headers or {})}
    return Session(
        base_url=base_url,
        workload=workload,
        levels=tuple(plans),
        api_key=target.api_key,
        headers=headers,
        http=target.http,
        workers=target.workers,
        ray=target.ray,
        scrape=target.scrape,
        auto_ramp=ld.mode == "closed",
        start=target.start,
        command="sweep",
        extra_settings={"profile": profile.to_json()},
    )
