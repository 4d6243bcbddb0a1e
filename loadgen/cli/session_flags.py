"""What ``run`` and ``sweep`` share on the command line: their connection flags, progress, and the stop
signals they add to the library's ``execute``."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from loadgen.choices import EventLoop, Placement, Scrape, Start, Transport
from loadgen.cli.bounds import bounded
from loadgen.cli.progress import PlainProgress, RichProgress
from loadgen.cli.stop_signals import SIGNALS, StopRequested
from loadgen.errors import UsageError, parse_json
from loadgen.inputs.workload import owned_key_problem
from loadgen.quantity import LAG_THRESHOLD_MS
from loadgen.results import Results
from loadgen.run.assembly import TargetOptions
from loadgen.run.launch import execute as run_execute
from loadgen.run.observe import LevelObserver, NullObserver
from loadgen.run.ray_workers import RayOptions, check_reachable, require_ray
from loadgen.run.session import Session, SessionHooks
from loadgen.sim.openai_app import SimOptions
from loadgen.wire.client import HttpOptions
from loadgen.wire.loops import loop_factory
from loadgen.wire.sse import Convention
from loadgen.wire.target import parse_headers


def parse_extra_body(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    value = parse_json(text, "--extra-body")
    if not isinstance(value, dict):
        raise UsageError("--extra-body: expected a JSON object, e.g. '{\"ignore_eos\": true}'")
    problem = owned_key_problem(value)
    if problem:
        raise UsageError(f"--extra-body {problem}")
    return value


def ray_options(address: str | None, placement: Placement, num_cpus: float) -> RayOptions | None:
    """``--ray`` and its companions; None without ``--ray`` (which nothing else needs)."""
    if address is None:
        return None
    if not address.strip():
        raise UsageError("--ray: give local, auto, or a cluster address (ray://HOST:PORT)")
    if address.strip() == "local":
        local_ray_environment()
    require_ray()  # before any request is sent
    bounded("--ray-num-cpus", num_cpus, minimum=0, exclusive=True, maximum=1024)
    check_reachable(address.strip())
    return RayOptions(address.strip(), placement, num_cpus)


def local_ray_environment() -> None:
    """Tell Ray, before its import reads the switches, that ``--ray local`` is a one-host instance: every
    server it starts listens on 127.0.0.1 only (by default on every interface, so a laptop run would open
    ports to its network), and it sends no usage report anywhere (its default does)."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray's one-host switch: loopback binds
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def http_options(
    timeout: float,
    insecure: bool,
    transport: Transport,
    max_event_mib: float = 4.0,
    request_id_header: str = "X-Request-Id",
    event_loop: EventLoop = EventLoop.AUTO,
) -> HttpOptions:
    bounded("--timeout", timeout, minimum=0, exclusive=True)
    loop_factory(event_loop)  # asked for uvloop where it is missing: say so before any request
    bounded("--max-event-mib", max_event_mib, minimum=0, exclusive=True, maximum=1024)
    name = request_id_header.strip()
    if name and not _TOKEN.fullmatch(name):
        raise UsageError(f"--request-id-header: {request_id_header!r} is not a header name (letters, digits, -)")
    return HttpOptions(
        timeout_s=timeout,
        verify_tls=not insecure,
        transport=transport,
        max_event_chars=int(max_event_mib * 2**20),
        request_id_header=name or None,
        event_loop=event_loop,
    )


def target_options(
    api_key: str | None,
    header: list[str] | None,
    http: HttpOptions,
    workers: int,
    ray: RayOptions | None,
    scrape: Scrape,
    metric_convention: Convention,
    start: Start,
    lag_threshold_ms: float = LAG_THRESHOLD_MS,
) -> TargetOptions:
    """The connection flags ``run`` and ``sweep`` share."""
    return TargetOptions(
        api_key=api_key,
        headers=parse_headers(header or []),
        http=http,
        workers=workers,
        ray=ray,
        scrape=scrape,
        metric_convention=metric_convention,
        start=start,
        lag_threshold_ms=lag_threshold_ms,
    )


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")  # an HTTP header name (RFC 9110 token), bounded


def progress_observer(console: Console, quiet: bool) -> LevelObserver:
    """A live line on a terminal; plain lines every 10 s in a log (CI); nothing with --quiet."""
    if quiet:
        return NullObserver()
    return RichProgress(console) if sys.stderr.isatty() else PlainProgress(console)


def execute(
    url: str | None,
    sim: SimOptions | None,
    build: Callable[[str], Session],
    hooks_for: Callable[[Session], SessionHooks],
    *,
    virtual_time: bool = False,
) -> Results:
    """``loadgen.run.launch.execute`` with the command's stop signals: the first Ctrl-C, SIGTERM or SIGHUP
    stops admitting and drains for a bounded grace (the results are written, marked incomplete); repeats
    change nothing (see ``stop_signals``)."""
    results = run_execute(url, sim, build, hooks_for, virtual_time=virtual_time, interrupts=SIGNALS.steering)
    if not results.levels and SIGNALS.first is not None:  # stopped in the preflight: nothing was measured
        raise StopRequested(SIGNALS.first)
    return results
