"""Splits one level across Ray actors, on one host or many: the same per-worker loop as ``--workers``.

Each actor runs ``loadgen.run.split.run_share`` (its own event loop and connection pool) on a share from
``split_plan``; the driver merges the shares with ``merge_shares``, exactly as for local processes. Ray is
imported only here, and this module only when ``--ray`` is given.

One time base across hosts: before a level, the driver reads each actor's wall clock a few times and keeps
the reading with the shortest round trip (offset = actor clock - midpoint of the driver's send and receive,
known to within half that round trip). It then picks a start instant on its own wall clock far enough ahead
for every actor to be told, and each actor starts at that instant on its clock, corrected by its offset,
converted to its own monotonic clock. Latencies are differences on one host's clock, so they never depend on
the offset; the window's start and end do. Hosts' clocks are assumed NTP-synchronised to a few ms: an offset
beyond ``CLOCK_WARN_MS`` (plus the reading's uncertainty) is reported.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from loadgen.choices import Placement
from loadgen.errors import LoadgenError, UsageError
from loadgen.histogram import DEFAULT_CONFIG
from loadgen.level.result import LevelResult
from loadgen.load import LevelPlan, Load
from loadgen.run.level_executors import LevelRun, level_notes
from loadgen.run.metrics import LiveSnapshot
from loadgen.run.observe import LevelObserver, LoadSnapshot, SweepStep
from loadgen.run.requests import Workload
from loadgen.run.runner import PROGRESS_INTERVAL_S
from loadgen.run.split import SplitOutcome, SplitTarget, WorkerJob, merge_shares, run_share
from loadgen.wire.loops import loop_factory, running_loop_name

PLACE_TIMEOUT_S = 60.0  # the cluster must find room for every actor within this
CONNECT_CHECK_S = 5.0  # a cluster address must accept a connection within this
CLOCK_READINGS = 5  # round trips per actor; the shortest one is kept
CLOCK_WARN_MS = 5.0  # NTP keeps hosts within a few ms; beyond this the assumption is stated as broken
START_MARGIN_S = 0.5  # the start instant is at least this far ahead of the driver's clock
START_ATTEMPTS = 3  # a level whose start call reached an actor too late begins again, further ahead


@dataclass(frozen=True, slots=True)
class RayOptions:
    """Where and how the actors run (``--ray``, ``--ray-placement``, ``--ray-num-cpus``)."""

    address: str = "local"  # "local": a Ray instance started here; "auto": the cluster this host is in; or ray://
    placement: Placement = Placement.SPREAD  # spread the actors over nodes, or pack them onto as few as possible
    num_cpus: float = 1.0  # CPUs reserved per actor (one event loop uses about one core at full speed)

    def describe(self) -> dict[str, Any]:
        return {"address": self.address, "placement": self.placement, "num_cpus": self.num_cpus}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockReading:
    worker: int
    node: str
    offset_ms: float  # the actor's wall clock minus the driver's
    rtt_ms: float  # the round trip of the kept reading: the offset is known to within half of it
    niceness: int = 0  # the actor process's nice value (Ray starts workers at 15; ours lower it to 0 when allowed)

    @property
    def suspect(self) -> bool:
        return abs(self.offset_ms) > CLOCK_WARN_MS + self.rtt_ms / 2


@dataclass(frozen=True, slots=True)
class RayOutcome:
    outcome: SplitOutcome
    clocks: tuple[ClockReading, ...]
    loops: tuple[str, ...] = ()  # per worker: the event loop its share ran on


@dataclass(slots=True, kw_only=True)
class OnRayActors:
    """The executor for ``--ray``: each level split over Ray actors (``LevelExecutor``). It keeps each level's
    worker clocks for the results and says when a clock, a worker's niceness or its event loop is not what
    the measurement assumes."""

    target: SplitTarget
    options: RayOptions
    event_loop: str  # the loop asked for: a node without it runs another, and that is said
    clocks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by level label

    async def run(self, plan: LevelPlan, workload: Workload, observer: LevelObserver, stop: asyncio.Event) -> LevelRun:
        on_ray = await run_level_on_ray(plan, workload, self.target, stop=stop, options=self.options, observer=observer)
        self.clocks[plan.load.label] = [asdict(c) for c in on_ray.clocks]
        return LevelRun(on_ray.outcome.result, level_notes(plan, [*self._notes(on_ray), *on_ray.outcome.lost_workers]))

    def _notes(self, on_ray: RayOutcome) -> list[str]:
        return [
            *(
                f"worker {c.worker} on {c.node}: its clock is {c.offset_ms:+.1f} ms from the driver's "
                f"(+-{c.rtt_ms / 2:.1f} ms); the start was corrected, but hosts are assumed NTP-synchronised to a few ms"
                for c in on_ray.clocks
                if c.suspect
            ),
            *(
                f"worker {c.worker} on {c.node} ran at nice {c.niceness} (Ray starts its workers at 15 and this one "
                "could not lower it): any busy process on that node takes its core first; start Ray with "
                "RAY_worker_niceness=0"
                for c in on_ray.clocks
                if c.niceness > 0
            ),
            *(
                f"worker {i} ran on {ran}'s event loop, not {self.event_loop} (not installed on its node)"
                for i, ran in enumerate(on_ray.loops)
                if ran and ran != self.event_loop  # "": no loop was made (that worker is reported lost)
            ),
        ]

    def settings(self) -> dict[str, Any]:
        placed = f"by Ray: {self.options.placement} placement of its actors over its nodes"  # as --workers says its own
        ray = {"ray": {**self.options.describe(), "clocks": self.clocks}, "worker_placement": placed}
        return ray if self.clocks else {}


def require_ray() -> Any:
    """The ``ray`` module, or a one-line usage error naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'loadgen[ray]'") from None
    return ray


def connect(options: RayOptions) -> None:
    """Join the cluster named by ``--ray`` (or start a local instance); reuse a connection already made."""
    ray = require_ray()
    if ray.is_initialized():
        return
    address = None if options.address == "local" else options.address  # (reachable: checked by --ray's reader)
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            namespace="loadgen",
            # an instance we start runs its workers at normal priority (Ray's default nice is 15)
            _system_config={"worker_niceness": 0} if address is None else None,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise LoadgenError(f"--ray {options.address}: cannot connect to Ray ({exc})") from None
    if address is None:
        # ray.init returns while the instance it started still spawns and imports its worker processes;
        # on a small host that start-up would overlap the first level: one actor round trip waits it out
        probe = ray.remote(ShareActor).options(num_cpus=0).remote()
        try:
            ray.get(probe.clock.remote(), timeout=PLACE_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise LoadgenError(f"the local Ray instance ran no actor within {PLACE_TIMEOUT_S:g} s") from None
        finally:
            ray.kill(probe)


def check_reachable(address: str) -> None:
    """Fail in seconds when nothing listens at a cluster address: ``ray.init`` would retry for minutes."""
    if address in ("local", "auto"):
        return
    hostport = address.removeprefix("ray://")
    host, sep, port_text = hostport.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536 or not host:
        raise UsageError(f"--ray {address}: expected local, auto, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=CONNECT_CHECK_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__.replace("Error", " error").lower()
        raise LoadgenError(
            f"--ray {address}: nothing answers at {hostport} ({reason}); start the cluster there "
            "(ray start --head) or give --ray local"
        ) from None


class _ShareThread:
    """One share running on its own event loop in a thread of the actor.

    Ray runs an async actor's methods on its own asyncio loop; the share gets
    the loop the user chose (``--event-loop``, uvloop by default, as local
    workers do) in a thread, so what the results record as the generator's
    loop is what ran. The actor's methods stay on Ray's loop and reach the
    share only through thread-safe calls.
    """

    def __init__(self, job: WorkerJob, t0: float, observer: LevelObserver) -> None:
        self.done: concurrent.futures.Future[LevelResult] = concurrent.futures.Future()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[LevelResult] | None = None
        self._stop: asyncio.Event | None = None
        self.loop_name = ""  # the loop the share runs on, as it found it
        self._thread = threading.Thread(
            target=self._work, args=(job, t0, observer), name=f"loadgen-share-{job.index}", daemon=True
        )
        self._thread.start()
        self._ready.wait()

    def _work(self, job: WorkerJob, t0: float, observer: LevelObserver) -> None:
        async def share() -> LevelResult:
            self._loop, self._task, self._stop = asyncio.get_running_loop(), asyncio.current_task(), asyncio.Event()
            self.loop_name = running_loop_name()
            self._ready.set()
            return await run_share(job, t0, self._stop, observer)

        try:
            with asyncio.Runner(loop_factory=loop_factory(job.http.event_loop)) as runner:
                self.done.set_result(runner.run(share()))
        except BaseException as exc:  # handed to the actor's caller (cancelled, or failed: reported)
            self.done.set_exception(exc)
        finally:
            self._ready.set()  # a loop that could not be made: begin() must not wait forever

    def stop(self) -> None:
        """End the share's level early (as an interrupt does); its result still comes."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def cancel(self) -> None:
        """Drop the share: its task is cancelled and no result comes."""
        if self._loop is not None and self._task is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed: nothing to cancel
                self._loop.call_soon_threadsafe(self._task.cancel)


class ShareActor:
    """Runs one worker's share of a level inside a Ray actor, on the share's own loop (``_ShareThread``)."""

    def __init__(self) -> None:
        self._share: _ShareThread | None = None
        self._live: LiveSnapshot | None = None
        # Ray starts its workers at nice 15, so any busy process on the node takes the core first and
        # the generator's timestamps slip (measured here: 95% of its ready time waiting beside two
        # CPU-bound processes). Back to 0 where the node allows it (root, CAP_SYS_NICE); else reported.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, 0)

    async def clock(self) -> tuple[float, str, int]:
        return time.time(), socket.gethostname(), os.getpriority(os.PRIO_PROCESS, 0)

    async def begin(self, job: WorkerJob, start_wall: float, offset_s: float) -> tuple[float, str]:
        """Start the share at ``start_wall`` on the driver's clock (``offset_s``: ours minus the driver's).

        Returns at once, with how late this call arrived (s on the driver's clock; <= 0: in time) and
        the event loop the share runs on (a node without uvloop runs asyncio's under ``auto``).
        """
        now = time.time()
        self._share = _ShareThread(job, time.monotonic() + (start_wall + offset_s - now), self)
        return now - offset_s - start_wall, self._share.loop_name

    async def result(self) -> dict[str, Any]:
        assert self._share is not None
        return (await asyncio.wrap_future(self._share.done)).to_json()

    async def cancel(self) -> None:
        """Drop a share that began too late (the driver starts the level again further ahead)."""
        if self._share is not None:
            self._share.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wrap_future(self._share.done)
            self._share = None

    async def stop(self) -> None:
        if self._share is not None:
            self._share.stop()

    async def live(self) -> LiveSnapshot | None:
        return self._live

    # LevelObserver, called by the runner inside this actor
    def on_sweep_step(self, step: SweepStep) -> None:
        pass

    def on_level_start(self, load: Load, planned_s: float | None) -> None:
        pass

    def on_progress(self, snapshot: LoadSnapshot) -> None:
        self._live = snapshot.live

    def on_level_end(self, result: LevelResult) -> None:
        pass


async def run_level_on_ray(
    plan: LevelPlan,
    workload: Workload,
    target: SplitTarget,
    *,
    stop: asyncio.Event,
    options: RayOptions,
    observer: LevelObserver,
) -> RayOutcome:
    """Run ``plan`` on ``target.workers`` Ray actors and merge the results; a lost actor leaves the others' data."""
    ray = require_ray()
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    connect(options)
    jobs = target.jobs(plan, workload)
    group = placement_group([{"CPU": options.num_cpus}] * len(jobs), strategy=options.placement.upper())
    actors: list[Any] = []
    try:
        try:
            await asyncio.wait_for(group.ready(), PLACE_TIMEOUT_S)
        except TimeoutError:
            raise LoadgenError(
                f"Ray could not place {len(jobs)} actors of {options.num_cpus:g} CPU each within "
                f"{PLACE_TIMEOUT_S:g} s: lower --workers or --ray-num-cpus, or add nodes"
            ) from None
        remote = ray.remote(ShareActor)
        tag = uuid.uuid4().hex[:8]
        for i in range(len(jobs)):
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
            actors.append(
                remote.options(
                    num_cpus=options.num_cpus, scheduling_strategy=strategy, name=f"loadgen-{tag}-{i}"
                ).remote()
            )
        clocks = [await _read_clock(actor, i) for i, actor in enumerate(actors)]
        start_wall, late, loops = await _begin(actors, jobs, clocks)
        refs = {job.index: actor.result.remote() for job, actor in zip(jobs, actors)}
        observer.on_level_start(plan.load, plan.planned_s)
        parts, lost = await _collect(ray, actors, refs, stop, observer, plan.load, start_wall)
        lost += [f"worker {i} began {s * 1000:.0f} ms after the level's start: its window is short" for i, s in late]
    finally:
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)
    outcome = merge_shares(plan, parts, lost)
    observer.on_level_end(outcome.result)
    return RayOutcome(outcome, tuple(clocks), loops)


async def _begin(
    actors: list[Any], jobs: list[WorkerJob], clocks: list[ClockReading]
) -> tuple[float, list[tuple[int, float]], tuple[str, ...]]:
    """Start every share on one instant of the driver's clock.

    Returns the instant, the workers that began late and each share's event loop.

    The instant is a few round trips ahead. On a loaded host a call can still
    arrive after it, which would cut that worker's window short: then every
    share is dropped and the level begins again further ahead (up to
    ``START_ATTEMPTS`` times; after that the late workers are reported).
    """
    margin = max(START_MARGIN_S, 4 * max(c.rtt_ms for c in clocks) / 1000)
    for _ in range(START_ATTEMPTS):
        start_wall = time.time() + margin
        begun = await asyncio.gather(
            *(a.begin.remote(job, start_wall, c.offset_ms / 1000) for a, job, c in zip(actors, jobs, clocks))
        )
        loops = tuple(loop for _, loop in begun)
        late = [(job.index, s) for job, (s, _) in zip(jobs, begun) if s > 0]
        if not late:
            return start_wall, [], loops
        await asyncio.gather(*(a.cancel.remote() for a in actors))
        margin = max(4 * margin, 2 * max(s for _, s in late))
    return start_wall, late, loops


async def _read_clock(actor: Any, worker: int) -> ClockReading:
    best: tuple[float, float, str, int] | None = None  # rtt, offset, node, niceness
    for _ in range(CLOCK_READINGS):
        sent = time.time()
        theirs, node, niceness = await actor.clock.remote()
        back = time.time()
        reading = (back - sent, theirs - (sent + back) / 2, node, niceness)
        if best is None or reading[0] < best[0]:
            best = reading
    assert best is not None
    return ClockReading(worker=worker, node=best[2], offset_ms=best[1] * 1000, rtt_ms=best[0] * 1000, niceness=best[3])


async def _collect(
    ray: Any,
    actors: list[Any],
    refs: dict[int, Any],
    stop: asyncio.Event,
    observer: LevelObserver,
    load: Load,
    start_wall: float,
) -> tuple[list[LevelResult], list[str]]:
    """Wait for every share; relay a stop; show one live view of the whole level meanwhile."""
    futures = {asyncio.ensure_future(ref): i for i, ref in refs.items()}
    parts: list[LevelResult] = []
    lost: list[str] = []
    stopping = False
    pending = set(futures)
    while pending:
        if stop.is_set() and not stopping:
            stopping = True
            for i in refs:
                actors[i].stop.remote()
        done, pending = await asyncio.wait(pending, timeout=PROGRESS_INTERVAL_S)
        for future in done:
            i = futures[future]
            try:
                parts.append(LevelResult.from_json(future.result(), DEFAULT_CONFIG))
            except ray.exceptions.RayActorError as exc:
                lost.append(f"worker {i} (Ray actor) died: {str(exc).splitlines()[0]}")
            except ray.exceptions.RayTaskError as exc:
                lost.append(f"worker {i} (Ray actor) failed: {str(exc.cause) or type(exc.cause).__name__}")
        if pending:
            await _show_progress(ray, actors, [futures[f] for f in pending], observer, load, start_wall)
    return parts, lost


async def _show_progress(
    ray: Any, actors: list[Any], running: list[int], observer: LevelObserver, load: Load, start_wall: float
) -> None:
    """Counts add up across actors; a percentile cannot, so the live view shows the highest."""
    try:
        lives = [x for x in await asyncio.gather(*(actors[i].live.remote() for i in running)) if x is not None]
    except ray.exceptions.RayError:  # an actor dying mid-poll is reported by _collect; the view skips a tick
        return
    if not lives:
        return

    def worst(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    live = LiveSnapshot(
        completed=sum(x.completed for x in lives),
        failed=sum(x.failed for x in lives),
        in_flight=sum(x.in_flight for x in lives),
        output_tokens=sum(x.output_tokens for x in lives),
        ttft_p50_ms=worst([x.ttft_p50_ms for x in lives]),
        ttft_p95_ms=worst([x.ttft_p95_ms for x in lives]),
        tpot_p50_ms=worst([x.tpot_p50_ms for x in lives]),
        tpot_p95_ms=worst([x.tpot_p95_ms for x in lives]),
        window_output_tokens=sum(x.window_output_tokens for x in lives),
    )
    observer.on_progress(LoadSnapshot(load, time.time() - start_wall, live))
