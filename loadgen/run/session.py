"""Runs a list of levels against one target and assembles the results file.

Shared by ``loadgen run`` (one level) and ``loadgen sweep`` (many, with a
stop policy). Before any load: the target is checked (``/models``) and one
probe request is streamed, so an unusable endpoint fails fast with one clear
line, and the probe's duration sets the default ramp-up. After every level
the caller's checkpoint sees the results so far (a sweep writes them
atomically), so an interrupt never loses a finished level.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import platform
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from loadgen import __version__
from loadgen.choices import Scrape, Start
from loadgen.errors import EndpointError
from loadgen.level.result import LevelResult
from loadgen.load import LevelPlan
from loadgen.results import Results, RetriedLevel, RunInfo, Target
from loadgen.run.level_executors import InProcess, LevelExecutor
from loadgen.run.observe import LevelObserver, NullObserver, RunPace, SweepStep
from loadgen.run.ray_workers import OnRayActors, RayOptions
from loadgen.run.requests import PreparedRequest, PromptCalibration, RequestFactory, Workload
from loadgen.run.runner import FLOOR_MARGIN, MAX_FLOOR_S
from loadgen.run.scrape import metrics_url, probe
from loadgen.run.split import SplitTarget
from loadgen.run.workers import InWorkerProcesses
from loadgen.run_settings import RunSettings
from loadgen.wire.client import HttpOptions, make_http_client
from loadgen.wire.loops import loop_name, running_loop_name
from loadgen.wire.native import READ_PATH
from loadgen.wire.records import Clock, RequestRecord
from loadgen.wire.secrets import scrub
from loadgen.wire.send import send_request
from loadgen.wire.target import redact_headers, redact_url, resolve_model, url_secrets

MAX_AUTO_RAMP_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """One run or sweep: the target, the workload and the levels."""

    base_url: str  # normalized, ends in "/"; may hold credentials: never stored
    workload: Workload  # model "" means: the first id from /models
    levels: tuple[LevelPlan, ...]
    api_key: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    http: HttpOptions = field(default_factory=HttpOptions)
    workers: int = 1
    ray: RayOptions | None = None  # run the workers as Ray actors (one host or a cluster) instead of processes
    scrape: Scrape = Scrape.AUTO
    auto_ramp: bool = True  # closed loop: ramp over about one request's duration
    start: Start = Start.STAGGERED  # closed loop: clients start spread over the ramp, or all at once (burst)
    retries: int = 0  # measure a level again this often while ``SessionHooks.retry_policy`` gives a reason
    command: str = "run"
    extra_settings: Mapping[str, Any] = field(default_factory=dict)
    virtual_time: bool = False  # on a ``loadgen.run.vtime`` loop, with the simulator in it: the loop's clock

    def clock(self) -> Clock:
        """The clock every timestamp is read from: ``time.monotonic``, or the virtual loop's own."""
        return asyncio.get_running_loop().time if self.virtual_time else time.monotonic

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret this session knows: to scrub from any server-supplied text before it is kept."""
        keys = (self.api_key,) if self.api_key else ()
        return keys + tuple(v for v in self.headers.values() if v) + url_secrets(self.base_url)

    @property
    def split(self) -> bool:
        """Whether levels run as shares on several processes or actors (not in this event loop)."""
        return self.workers > 1 or self.ray is not None

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.api_key:
            headers.setdefault("Authorization", f"Bearer {self.api_key}")
        return headers


"""How closed-loop clients start. ``staggered`` spreads them over about one request's duration (or
``--ramp-up``); ``burst`` starts all at once, as vLLM's own benchmark client does. With fixed output
lengths a burst phase-locks clients into cohorts that arrive, prefill and finish together: TTFT and
TPOT then describe that shape (the fidelity check measured TTFT p50 907 ms burst vs 178 ms staggered
at c=8 on the same server). Both are real; results record which one was measured."""

StopPolicy = Callable[[list[LevelResult]], str | None]  # a reason to stop, or None to go on
#: why a finished level should be measured again (the measurement, not the service, made it untrusted),
#: and whether the next attempt needs a longer window; None: it counts as it is
RetryPolicy = Callable[[LevelResult], tuple[str, bool] | None]
RETRY_SETTLE_S = 2.0  # between attempts: the server drains what the cut attempt left, the machine settles


@dataclass(slots=True, kw_only=True)
class SessionHooks:
    observer: LevelObserver = field(default_factory=NullObserver)
    checkpoint: Callable[[Results], None] | None = None
    on_record: Callable[[RequestRecord], None] | None = None
    on_level_plan: Callable[[LevelPlan], None] | None = None
    stop_policy: StopPolicy | None = None
    retry_policy: RetryPolicy | None = None
    notes: list[str] = field(default_factory=list)  # warnings to report (lost workers, early stop)


async def run_session(session: Session, hooks: SessionHooks, stop: asyncio.Event) -> Results:
    """Preflight, then run each level in order until done, stopped by policy, or interrupted."""
    shown = redact_url(session.base_url)
    started_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    pace = RunPace(clock=session.clock(), virtual=session.virtual_time)  # the preflight's pace: the first guess
    headers = session.request_headers()
    async with make_http_client(session.base_url, headers, session.http) as http:
        preflight = asyncio.create_task(_preflight(http, session, shown))
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({preflight, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        stopped_early = stop.is_set()  # a stop signal while the target was checked: no load is sent
        if stopped_early:
            preflight.cancel()
            await asyncio.gather(preflight, return_exceptions=True)
            workload, probe_s, scrape = session.workload, 0.0, False
        else:
            workload, probe_s, scrape = preflight.result()
        info = RunInfo(
            id=uuid.uuid4().hex[:12],
            started_at=started_at,
            tool_version=__version__,
            python=platform.python_version(),
            platform=platform.platform(),
            cpu_count=os.cpu_count(),
            command=session.command,
        )
        target = Target(base_url=shown, model=workload.model, api=workload.api)
        settings = _settings(session, workload, scrape)
        executor = _executor(session, http, headers, scrape, hooks)
        done: list[LevelResult] = []
        retried: list[RetriedLevel] = []

        def results(complete: bool) -> Results:
            stored = RunSettings.from_json({**settings, **executor.settings()})  # Ray's clocks arrive level by level
            return Results(
                run=info,
                target=target,
                settings=stored,
                levels=tuple(done),
                complete=complete,
                notes=tuple(hooks.notes),
                retried=tuple(retried),
            )

        if stopped_early:
            return results(complete=False)

        ended: list[int | None] = []  # the batch sizes whose series a stop ended (pooling sweeps)
        for index, plan in enumerate(session.levels, 1):
            if ended and plan.load.batch in ended:
                continue
            if session.start == "burst":
                plan = replace(plan, ramp_up_s=0.0)
            elif session.auto_ramp and plan.load.kind == "concurrency":
                plan = replace(plan, ramp_up_s=_auto_ramp(probe_s, plan))
            if plan.load.kind == "rate" or session.split:  # one process closed loop: the runner extends
                plan = with_request_floor(plan, _expected_rps(plan, done, probe_s))
            if hooks.on_level_plan is not None:
                hooks.on_level_plan(plan)
            hooks.observer.on_sweep_step(_step(session, index, plan, done, probe_s, pace=pace.now(done, retried)))
            level = await _one_level(executor, plan, workload, hooks, stop)
            while (retry := _retry(level, session, hooks, stop)) is not None:
                why, lengthen = retry
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RETRY_SETTLE_S)
                if stop.is_set():  # stopped while settling: this attempt is what there is
                    break
                retried.append(RetriedLevel(level.attempt, why, level))
                if lengthen and plan.duration_s is not None:
                    plan = replace(plan, duration_s=min(2 * plan.duration_s, MAX_FLOOR_S))
                if hooks.on_level_plan is not None:
                    hooks.on_level_plan(plan)
                attempt = level.attempt + 1
                hooks.observer.on_sweep_step(
                    _step(session, index, plan, done, probe_s, attempt, why, pace.now(done, retried))
                )
                level = await _one_level(executor, plan, workload, hooks, stop)
                level = replace(level, attempt=attempt)
            done.append(level)
            if hooks.checkpoint is not None:
                hooks.checkpoint(results(complete=False))
            if not level.complete or stop.is_set():
                break
            reason = hooks.stop_policy(done) if hooks.stop_policy else None
            if reason:
                hooks.notes.append(reason)
                if all(p.load.batch == plan.load.batch for p in session.levels[index:]):
                    break
                ended.append(plan.load.batch)  # the next batch size's series starts afresh
        complete = bool(done) and all(level.complete for level in done) and not stop.is_set()
        return results(complete)


def _retry(level: LevelResult, session: Session, hooks: SessionHooks, stop: asyncio.Event) -> tuple[str, bool] | None:
    """Why this attempt should not count and be measured again, while attempts are left."""
    if hooks.retry_policy is None or level.attempt > session.retries or not level.complete or stop.is_set():
        return None
    return hooks.retry_policy(level)


async def _preflight(http: Any, session: Session, shown: str) -> tuple[Workload, float, bool]:
    """Before any load: the model (checked on ``/models``), the prompt calibration, one probe request of the
    length asked and whether ``/metrics`` answers. Returns the workload as it will be sent, the probe's
    seconds, scrape. The calibration comes first: a prompt sized one word a token may be several times
    the length asked, past what the model takes."""
    model, served = await resolve_model(http, shown, session.workload.model or None)
    model = scrub(model, session.secrets)  # a /models id is the server's text: it may echo a key
    mix = session.workload.models
    if mix is not None and served and (unknown := [n for n in mix.names if n not in served]):
        listed = ", ".join(served[:10]) + (", ..." if len(served) > 10 else "")
        raise EndpointError(f"{shown}: --models {', '.join(unknown)}: not served; /models lists: {listed}")
    workload = replace(session.workload, model=model)
    workload = replace(workload, calibration=await _calibrate(http, workload, session, shown, served))
    record = await _probe(http, RequestFactory(workload, seed=-1 % 2**32).next(), workload, session, shown, served)
    probe_s = record.t_done - record.t_intended
    scrape = session.scrape == "on" or (session.scrape == "auto" and await probe(http, metrics_url(session.base_url)))
    return workload, probe_s, scrape


def _executor(
    session: Session, http: Any, headers: Mapping[str, str], scrape: bool, hooks: SessionHooks
) -> LevelExecutor:
    """Where every level of this session runs: picked once."""
    if not session.split:
        scraped = metrics_url(session.base_url) if scrape else None
        return InProcess(
            http=http,
            metrics_url=scraped,
            clock=session.clock(),
            real_time=not session.virtual_time,
            on_record=hooks.on_record,
        )
    target = SplitTarget(
        base_url=session.base_url, headers=headers, http=session.http, workers=session.workers, scrape=scrape
    )
    if session.ray is not None:
        return OnRayActors(target=target, options=session.ray, event_loop=_event_loop(session))
    return InWorkerProcesses(target)


async def _one_level(
    executor: LevelExecutor, plan: LevelPlan, workload: Workload, hooks: SessionHooks, stop: asyncio.Event
) -> LevelResult:
    run = await executor.run(plan, workload, hooks.observer, stop)
    hooks.notes.extend(run.notes)
    return run.result


PROBE_ATTEMPTS = 3
CONFIG_STATUSES = frozenset({400, 401, 403, 404, 405, 422})  # a wrong setup, not a flaky server


async def _probe(
    http: Any, prepared: PreparedRequest, workload: Workload, session: Session, shown: str, served: list[str]
) -> RequestRecord:
    """Stream one request before the load; returns its record, or raises ``EndpointError`` saying why.

    A status that means the setup is wrong fails at once; a flaky answer
    (5xx, 429, a broken stream) gets up to three tries, since a load test is
    often pointed at exactly such a server. The message carries the server's
    own reason (scrubbed of secrets) and, for a model it does not know, the ids
    ``/models`` lists.
    """
    clock = session.clock()
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        t = clock()
        record = await send_request(
            http,
            workload.path,
            prepared.body,
            workload.api,
            prepared.inputs,
            t_intended=t,
            clock=clock,
            timeout_s=session.http.timeout_s,
            max_event_chars=session.http.max_event_chars,
            max_tokens=prepared.max_tokens,
        )
        if record.error is None:
            return record
        status = record.http_status if record.http_status and record.http_status >= 400 else None
        if status in CONFIG_STATUSES or attempt == PROBE_ATTEMPTS:
            what = scrub(record.error_detail or record.error.value, session.secrets)
            if status in (401, 403):
                what += "; check --api-key"
            elif status == 404 and workload.model not in served:
                listed = ", ".join(served[:10]) + (", ..." if len(served) > 10 else "")
                what += f"; /models lists: {listed or 'nothing'} (pass --model)"
            raise EndpointError(f"{shown}: probe request to /{workload.path} failed ({what})")
    raise AssertionError("unreachable")


def _step(
    session: Session,
    index: int,
    plan: LevelPlan,
    done: list[LevelResult],
    probe_s: float,
    attempt: int = 1,
    why: str | None = None,
    pace: tuple[float, float] = (1.0, 1.0),
) -> SweepStep:
    """This attempt's place in the run and the time left in wall time (``pace``): this level's and the later
    ones' (as often as levels were measured so far), each its request floor at the last level's rate."""
    later = [_expected_s(p, _rate_guess(p, done, probe_s)) for p in session.levels[index:]]
    after = None if any(s is None for s in later) else pace[1] * sum(s for s in later if s is not None)
    this = _expected_s(plan, _rate_guess(plan, done, probe_s))
    return SweepStep(
        load=plan.load,
        index=index,
        count=len(session.levels),
        attempt=attempt,
        retry_reason=why,
        this_s=this,
        after_s=after,
        wall_per_s=pace[0],
    )


def _rate_guess(plan: LevelPlan, done: list[LevelResult], probe_s: float) -> float | None:
    """A level's completions/s for the time left: the rate asked (open loop), else the last level's rate
    scaled by its clients (as a server below saturation serves them), or one client's from the probe."""
    if plan.load.kind == "rate":
        return plan.load.value
    last = next((lv for lv in reversed(done) if lv.requests_per_s and lv.load.kind == "concurrency"), None)
    if last is not None and last.requests_per_s:
        return last.requests_per_s * plan.load.value / last.load.value
    return plan.load.value / probe_s if probe_s > 0 else None


def _expected_s(plan: LevelPlan, rps: float | None) -> float | None:
    """How long a level should run: warm-up and window, the window lengthened to its request floor at ``rps``
    (a request budget at that rate); None without a rate where the length depends on one."""
    if plan.duration_s is not None:
        return with_request_floor(plan, rps).planned_s
    if plan.requests and rps:
        return plan.warmup_s + plan.requests / rps
    return None


def _expected_rps(plan: LevelPlan, done: list[LevelResult], probe_s: float) -> float | None:
    """A cautious guess of this level's completions/s, to size its window before it runs. Open loop: the rate
    asked. Closed loop: the previous level's rate (more clients complete at least as many requests), or one
    client's rate from the probe for the first level."""
    if plan.load.kind == "rate":
        return plan.load.value
    previous = done[-1].requests_per_s if done else None
    return previous or (1.0 / probe_s if probe_s > 0 else None)


def with_request_floor(plan: LevelPlan, expected_rps: float | None) -> LevelPlan:
    """Lengthen the measured duration so that about ``min_requests`` complete inside the window. A percentile
    needs a sample count (``loadgen.quantity.samples_needed``), not a duration: a p95 of six requests is their
    maximum. The window grows to reach the floor, up to ``MAX_FLOOR_S``; a level still short is then flagged
    by its trust verdict."""
    if not plan.min_requests or plan.duration_s is None or not expected_rps:
        return plan
    needed = FLOOR_MARGIN * plan.min_requests / expected_rps
    return replace(plan, duration_s=max(plan.duration_s, min(needed, MAX_FLOOR_S)))


async def _calibrate(
    http: Any, workload: Workload, session: Session, shown: str, served: list[str]
) -> PromptCalibration | None:
    """Measure how the server counts synthetic words (two one-token probes); None when it does not say.
    Datasets are sent as they are: only synthetic prompts are sized, and a dataset's recorded answer lengths
    (``output_from_dataset``) are converted from words."""
    if workload.dataset is not None and not workload.output_from_dataset:
        return None
    factory = RequestFactory(replace(workload, calibration=None), seed=-2 % 2**32)
    counts = []
    for copies in (1, 2):
        record = await _probe(http, factory.calibration_probe(copies), workload, session, shown, served)
        if record.prompt_tokens is None:
            return None
        counts.append(record.prompt_tokens)
    return factory.calibration(*counts)


def _auto_ramp(probe_s: float, plan: LevelPlan) -> float:
    """About one request's duration, kept inside the warm-up when there is one."""
    ramp = min(probe_s, MAX_AUTO_RAMP_S)
    if plan.warmup_s > 0:
        return min(ramp, plan.warmup_s)
    if plan.duration_s is not None:
        ramp = min(ramp, plan.duration_s / 4)
    return ramp


def _event_loop(session: Session) -> str:
    """The event loop the levels run on: the one asked for in worker processes, else this process's."""
    return loop_name(session.http.event_loop) if session.split else running_loop_name()


def _settings(session: Session, workload: Workload, scrape: bool) -> dict[str, Any]:
    """The resolved configuration as stored: header values redacted, no key."""
    return {
        "api": workload.api,
        "model": workload.model,
        # per-request lengths from a dataset or a trace: no single length was asked
        "prompt_tokens": dataclasses.asdict(workload.prompt_tokens)
        if workload.dataset is None and not workload.lengths
        else None,
        "dataset_prompts": len(workload.dataset) if workload.dataset is not None else None,
        "output_tokens": None
        if workload.output_from_dataset or workload.lengths
        else dataclasses.asdict(workload.output_tokens),
        "output_from_dataset": workload.output_from_dataset,
        "unique_prompts": workload.unique_prompts,
        "images": dataclasses.asdict(workload.images) if workload.images is not None else None,
        "models": dict(zip(workload.models.names, workload.models.shares)) if workload.models is not None else None,
        "metric_convention": workload.metric_convention,
        "prompt_calibration": dataclasses.asdict(workload.calibration) if workload.calibration else None,
        "start": session.start,
        "retries": session.retries,
        "extra_body": dict(workload.extra_body),
        "headers": redact_headers(dict(session.headers)),
        "api_key": "<redacted>" if session.api_key else None,
        "request_id_header": session.http.request_id_header,
        "transport": session.http.transport,
        "event_loop": _event_loop(session),
        # how a streaming body was read: on the native wire, the compiled reader (loadgen.wire.fastread) or
        # its Python path; on aiohttp or httpx, that library's own reader (never to be read as the native one)
        "read_path": READ_PATH if session.http.transport == "native" else session.http.transport,
        "timeout_s": session.http.timeout_s,
        "verify_tls": session.http.verify_tls,
        "workers": session.workers,
        "ray": session.ray.describe() if session.ray is not None else None,
        "scrape_metrics": scrape,
        "virtual_time": session.virtual_time,
        "levels": [
            {
                "load": p.load.to_json(),
                "duration_s": p.duration_s,
                "requests": p.requests,
                "warmup_s": p.warmup_s,
                "seed": p.seed,
                "lag_threshold_ms": p.lag_threshold_ms,
                "min_requests": p.min_requests,
            }
            for p in session.levels
        ],
        **session.extra_settings,
    }
