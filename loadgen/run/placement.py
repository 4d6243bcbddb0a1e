"""Where ``--workers`` processes run: each on a core of its own when the machine has that many free.

Left to the scheduler, two workers were seen on one core of a two-core machine (each waited 42-46% of
the time it was ready to run), cost 3-8% more CPU per token than one process, and added nothing. So
before the first level the cores this process may use are sampled from ``/proc/stat``; where as many
are free as there are workers, worker i is pinned to the i-th of them. Where they are not, nothing is
pinned and the results say that more workers cannot help on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

FREE_IDLE_SHARE = 0.5  # a core idle at least half of the sample is free for a worker
SAMPLE_S = 0.25
PROC_STAT = Path("/proc/stat")

CoreTimes = Mapping[int, tuple[int, int]]  # core -> (idle jiffies, all jiffies)


@dataclass(frozen=True, slots=True)
class Placement:
    """Each worker's core (``cores[i]`` for worker i), or None where the workers are left unpinned; and
    the line the results keep (``settings.worker_placement``)."""

    cores: tuple[int, ...] | None
    said: str

    def pin(self, index: int, pid: int) -> None:
        """Pin worker ``index`` (process ``pid``) to its core, where it has one."""
        if self.cores is not None:
            with contextlib.suppress(OSError):  # a worker already gone is reported by its pipe, not here
                os.sched_setaffinity(pid, {self.cores[index]})


async def place(workers: int) -> Placement:
    """Where ``workers`` processes should run, from the cores' idle share over ``SAMPLE_S``."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    before = core_times()
    await asyncio.sleep(SAMPLE_S)
    after = core_times()
    if not allowed or before is None or after is None:
        return Placement(None, "not pinned: the cores' load cannot be read here (no /proc/stat)")
    return placement(workers, allowed, idle_shares(before, after))


def placement(workers: int, allowed: list[int], idle: Mapping[int, float]) -> Placement:
    """The workers on the most idle of the ``allowed`` cores that are free, one each, or none pinned."""
    free = sorted((core for core in allowed if idle.get(core, 0.0) >= FREE_IDLE_SHARE), key=lambda c: -idle[c])
    if len(free) >= workers:
        cores = tuple(sorted(free[:workers]))
        return Placement(cores, "pinned: " + ", ".join(f"worker {i} on core {c}" for i, c in enumerate(cores)))
    return Placement(
        None,
        f"not pinned: {len(free)} of the {len(allowed)} cores this process may use were free (at least "
        f"{FREE_IDLE_SHARE:.0%} idle) for {workers} workers; more workers cannot help on this machine",
    )


def idle_shares(before: CoreTimes, after: CoreTimes) -> dict[int, float]:
    """Each core's idle share between two readings (a core without jiffies in between reads idle)."""
    shares = {}
    for core, (idle, total) in after.items():
        if core in before:
            spent = total - before[core][1]
            shares[core] = (idle - before[core][0]) / spent if spent > 0 else 1.0
    return shares


def core_times(path: Path = PROC_STAT) -> dict[int, tuple[int, int]] | None:
    """Each core's idle and total jiffies from ``/proc/stat`` (idle and iowait are idle; guest time is
    already in user time); None where it cannot be read."""
    try:
        text = path.read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and len(values) >= 5:
            jiffies = [int(v) for v in values[:8]]
            out[int(name[3:])] = (jiffies[3] + jiffies[4], sum(jiffies))
    return out or None
