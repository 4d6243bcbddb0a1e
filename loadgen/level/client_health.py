"""Whether a level's numbers measure the server or the load generator: the client-health policy.

A busy generator reads chunks late, and the lateness lands in the latencies as if the server had
caused it. These bounds say when a level's generator could not keep up (``bound_causes``); the
verdicts then refuse to trust the level, and the caveats say why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from loadgen.quantity import Metric

if TYPE_CHECKING:
    from loadgen.level.result import LevelResult

CLIENT_CPU_BOUND: Final = 0.9  # a generator process busy 90% of the window cannot read on time
# Another process (a noisy neighbour, a hypervisor's steal) holds the generator's core when it waited
# for it more than this share of the time it was ready to run (wait / (wait + run)): it got less than
# 40% of a core each time it woke, i.e. at least two competitors. The share of the *window* it waited
# is no measure of that: a client that needs little CPU (the native wire) waits little in total even
# when every wake-up is late. Seen here at c=64 with the native wire, the simulator on the other core:
# 1% quiet; 44-47% with one CPU-bound process pinned to its core or one on each core (ITL p99 within
# ~20%, TTFT p50 within 2 ms); 75% with three pinned to its core (ITL p99 ~250 ms against ~90-120).
CLIENT_WAIT_BOUND: Final = 0.6
CLIENT_WAIT_FLOOR: Final = 0.05  # ...and it waited at least this share of the window (not a few wake-ups)
# One competitor is a fair half of the core, which a light generator can spare; a generator that wanted
# more than CLIENT_CPU_BOUND of its core (ran + waited for it) was behind all along, whoever held the
# core. Seen here at c=256 beside one CPU hog on its core: ran 49%, waited ~49%, TTFT p99 +75 ms (quiet:
# +7 ms); at c=64 beside the same hog: ran 26%, waited ~26%, within 1 ms of quiet.
# Below the bounds above, a level is trusted, but one whose generator waited at least this share of its
# ready time for a core shared it with another process: each wake-up can then be a scheduler slice late,
# which shows in the tail (c=256 beside one hog with the compiled reader: ready 88%, TTFT p99 +19.8 ms
# against +2-5 quiet, the median within 1 ms). Its timer-lateness caveat says so: the tail is an upper bound.
CORE_SHARED: Final = 0.25


def bound_causes(level: LevelResult) -> tuple[str, ...]:
    """Why the numbers measure the client, not the server (empty: they do not).

    p99 generator lag above the threshold (open loop); the generator's CPU
    saturated (closed loop, where lag cannot grow: a busy client reads
    late instead); or another process holding the generator's core (a
    noisy neighbour, CPU steal), which its own CPU time cannot show. A
    level split across workers is bound when any one worker was: the
    merged averages would hide one saturated worker among idle ones.
    """
    out = []
    p99 = level.histograms[Metric.LAG].percentile_us(99)
    if p99 is not None and p99 > level.lag_threshold_ms * 1000:
        out.append(f"send lag p99 {p99 / 1000:.1f} ms > {level.lag_threshold_ms:g} ms")
    cpu = level.client_cpu_utilization
    if cpu is not None and cpu > CLIENT_CPU_BOUND:
        out.append(f"generator CPU {cpu:.0%} busy")
    if (taken := _core_taken(level)) is not None:
        out.append(taken)
    return tuple(out) + level.bound_workers


def _core_taken(level: LevelResult) -> str | None:
    """Another process held the generator's core: it waited most of the time it was ready to run, or it
    would have been busy past the bound had it had the core."""
    cpu, steal, wait = level.client_cpu_utilization, level.steal_share, level.core_wait_ratio
    if steal is not None and wait is not None and wait > CLIENT_WAIT_BOUND and steal > CLIENT_WAIT_FLOOR:
        return f"its core taken by another process: it waited {wait:.0%} of the time it was ready to run"
    if cpu is not None and steal is not None and cpu <= CLIENT_CPU_BOUND < cpu + steal:
        return (
            f"generator ready to run {cpu + steal:.0%} of the window (it ran {cpu:.0%}, and waited "
            f"{steal:.0%} for a core another process held)"
        )
    return None


def remedy(level: LevelResult) -> str:
    """What would let a bound generator keep up, by its cause: more generator processes help a busy one
    with cores to spare, never one whose core another process held (with several workers on too few
    cores, each other): a generator that waited ``CORE_SHARED`` of its ready time already shared a core."""
    if _core_taken(level) is not None:
        return "a quieter machine, or no more generator processes than free cores"
    wait = level.core_wait_ratio
    if wait is not None and wait >= CORE_SHARED:
        return (
            f"a quieter machine; more workers cannot help here (the generator already shared its core: it "
            f"waited {wait:.0%} of the time it was ready to run)"
        )
    if level.workers > 1:
        return f"more workers than its {level.workers}, each on a free core, or a quieter machine"
    return "more workers (one process each, on free cores), or a quieter machine"
