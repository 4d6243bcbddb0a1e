"""Sweeps: a profile aimed at a target, as one session; the one assembly behind ``run`` and ``sweep``.

A run is a one-level sweep: ``loadgen run`` builds a one-level profile from
its flags and ``loadgen sweep`` loads one from YAML; both come through here,
so a level is planned, seeded and recorded the same way whichever command
asked for it. The early-stop policy is the planner's (``planner.ci.stop``),
wired in by the CLI, so a level is saturated by the same verdict everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.choices import Arrival, Scrape, Start
from loadgen.errors import UsageError
from loadgen.inputs.profile import Profile
from loadgen.inputs.profile_rules import broken_rules
from loadgen.inputs.trace import Trace, implied_prefix_share, load_trace
from loadgen.inputs.workload import load_dataset
from loadgen.load import LevelPlan, Load
from loadgen.quantity import LAG_THRESHOLD_MS, PER_REQUEST
from loadgen.run.ray_workers import RayOptions
from loadgen.run.requests import Workload
from loadgen.run.session import Session
from loadgen.sim.openai_app import SimOptions
from loadgen.wire.client import HttpOptions
from loadgen.wire.sse import Convention


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetOptions:
    """How to reach the endpoint and watch the client (flags only: never in a profile on disk, except headers)."""

    api_key: str | None = None
    headers: Mapping[str, str] | None = None
    http: HttpOptions = field(default_factory=HttpOptions)
    workers: int = 1
    ray: RayOptions | None = None
    scrape: Scrape = Scrape.AUTO
    metric_convention: Convention = Convention.TOKENS
    start: Start = Start.STAGGERED
    lag_threshold_ms: float = LAG_THRESHOLD_MS  # p99 generator lag that flags a level client-bound


def session_from_profile(profile: Profile, base_url: str, target: TargetOptions, command: str = "sweep") -> Session:
    """The levels and workload of a profile, aimed at ``base_url``."""
    w, ld = profile.workload, profile.load
    if (broken := next(broken_rules(profile), None)) is not None:  # a profile made in code: its fields' words
        raise UsageError(f"{profile.name}: {broken.said('profile')}")
    trace = load_trace(Path(ld.trace), ld.requests) if ld.trace else None
    if trace is not None and (target.workers > 1 or target.ray is not None):
        raise UsageError(f"{profile.name}: a trace is replayed by one worker process (no --workers, no --ray)")
    try:
        workload = Workload(
            api=profile.api,
            model=profile.model or "",
            prompt_tokens=w.prompt_tokens,
            output_tokens=w.output_tokens,
            dataset=load_dataset(Path(w.dataset), w.dataset_format, w.dataset_max_words) if w.dataset else None,
            output_from_dataset=w.output_from_dataset,
            lengths=tuple(zip(trace.prompt_tokens, trace.output_tokens)) if trace else None,
            prompt_blocks=trace.hash_ids if trace else None,
            block_tokens=ld.trace_block_tokens,
            images=w.images,
            models=profile.models,
            turns=w.turns,
            think_time_s=w.think_time_s,
            unique_prompts=not w.shared_prefix,
            extra_body=dict(profile.extra_body),
            metric_convention=target.metric_convention,
        )
    except ValueError as exc:
        raise UsageError(f"{profile.name}: {exc}") from None
    replayed = {"file": Path(ld.trace or "").name, "format": trace.format, "requests": len(trace.offsets_s),
                "span_s": round(trace.span_s, 6)} if trace is not None else None  # fmt: skip
    if trace is not None and (implied := implied_prefix_share(trace, ld.trace_block_tokens)) is not None:
        replayed = {
            **(replayed or {}),
            "block_tokens": ld.trace_block_tokens,
            "implied_prefix_share": round(implied, 4),
        }
    settings: dict[str, Any] = {"profile": profile.to_json(), **({"trace": replayed} if replayed else {})}
    return Session(
        base_url=base_url,
        workload=workload,
        levels=tuple(_plans(profile, target, trace)),
        api_key=target.api_key,
        headers={**profile.headers, **(target.headers or {})},
        http=target.http,
        workers=target.workers,
        ray=target.ray,
        scrape=target.scrape,
        auto_ramp=ld.mode == "closed" and ld.ramp_up_s is None,
        start=target.start,
        retries=ld.retries,
        command=command,
        extra_settings=settings,
    )


def simulator_options(profile: Profile) -> SimOptions | None:
    """The built-in simulator a profile aims at (None: a URL): its law and faults, serving every model name the
    profile's requests are split over as a LoRA adapter of its base model."""
    if profile.sim is None:
        return None
    base = SimOptions().model
    adapters = tuple(n for n in profile.models.names if n != base) if profile.models is not None else ()
    answers = profile.sim_answers
    return SimOptions(
        engine=profile.sim,
        faults=profile.sim_faults,
        lora_modules=adapters,
        reasoning_tokens=answers.reasoning_tokens,
        tool_call_share=answers.tool_call_share,
    )


def _plans(profile: Profile, target: TargetOptions, trace: Trace | None) -> list[LevelPlan]:
    """One plan per level: its load, its window, its seed (the profile's plus the level's index)."""
    ld = profile.load
    floor = ld.min_requests or max((s.samples_needed for s in profile.slo if s.metric in PER_REQUEST), default=None)
    goodput = tuple((s.metric, s.limit) for s in profile.slo if s.metric is not None)
    plans = []
    # a pooling API's levels: every load level at each batch size (the batch is part of the level)
    batches: tuple[int | None, ...] = profile.workload.batch_sizes if profile.api.pooling else (None,)
    for i, (batch, value) in enumerate((b, v) for b in batches for v in ld.levels):
        replay = trace.scaled(value) if trace else None
        if replay is not None:
            load = Load(
                kind="rate",
                value=float(f"{replay.mean_rate:.4g}"),
                arrival=Arrival.TRACE,
                burstiness=None,
                max_in_flight=ld.max_in_flight,
                batch=batch,
            )
        elif ld.mode == "closed":
            load = Load(kind="concurrency", value=int(value), batch=batch)
        else:
            load = Load(
                kind="rate",
                value=float(value),
                arrival=ld.arrival,
                burstiness=ld.burstiness,
                max_in_flight=ld.max_in_flight,
                batch=batch,
            )
        try:
            plans.append(
                LevelPlan(
                    load=load,
                    duration_s=None if replay else ld.duration_s,
                    requests=len(replay.offsets_s) if replay else ld.requests,
                    warmup_s=ld.warmup_s,
                    ramp_up_s=ld.ramp_up_s or 0.0,
                    timeout_s=target.http.timeout_s,
                    max_event_chars=target.http.max_event_chars,
                    request_id_header=target.http.request_id_header,
                    lag_threshold_ms=target.lag_threshold_ms,
                    seed=profile.seed + i,
                    goodput_limits_ms=goodput,
                    min_requests=floor,
                    arrivals_s=replay.offsets_s if replay else None,
                )
            )
        except ValueError as exc:
            raise UsageError(f"{profile.name}: load.levels[{i}]: {exc}") from None
    return plans
