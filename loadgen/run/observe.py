"""How the library reports progress without owning a console: an observer protocol."""

from __future__ import annotations

import time
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from typing import Protocol

from loadgen.level.result import LevelResult
from loadgen.load import Load
from loadgen.run.metrics import LiveSnapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepStep:
    """Where a level stands in its run, told before each attempt: its place among the levels, the attempt
    and why it is measured again, and how long this level and the ones after it are expected to take (from
    the request floor and the completion rate measured so far; None where there is no rate to go on)."""

    load: Load
    index: int  # from 1
    count: int
    attempt: int = 1
    retry_reason: str | None = None
    this_s: float | None = None
    after_s: float | None = None
    # wall seconds per second of the run's clock: 1 in real time; under --virtual-time, what the levels so
    # far took on the wall over what they simulated (a 101 s run read "about 9 min left" in simulated time)
    wall_per_s: float = 1.0


class LevelObserver(Protocol):
    """Receives progress from a running level. The CLI renders it; tests may record it."""

    def on_sweep_step(self, step: SweepStep) -> None: ...

    def on_level_start(self, load: Load, planned_s: float | None) -> None: ...

    def on_progress(self, snapshot: LoadSnapshot) -> None: ...

    def on_level_end(self, result: LevelResult) -> None: ...


class LoadSnapshot:
    """A progress tick: the live numbers, the level's elapsed time and, where the runner knows them, its
    planned length now (a request floor may lengthen it) and the time spent inside its measured window."""

    __slots__ = ("elapsed_s", "live", "load", "planned_s", "window_s")

    def __init__(
        self,
        load: Load,
        elapsed_s: float,
        live: LiveSnapshot,
        planned_s: float | None = None,
        window_s: float | None = None,
    ) -> None:
        self.load = load
        self.elapsed_s = elapsed_s
        self.live = live
        self.planned_s = planned_s
        self.window_s = window_s


class NullObserver:
    """Observes nothing (library default, tests, worker processes)."""

    def on_sweep_step(self, step: SweepStep) -> None:
        pass

    def on_level_start(self, load: Load, planned_s: float | None) -> None:
        pass

    def on_progress(self, snapshot: LoadSnapshot) -> None:
        pass

    def on_level_end(self, result: LevelResult) -> None:
        pass


@dataclass(slots=True, kw_only=True)
class RunPace:
    """How a run has gone so far, for its time left: wall seconds per second of its clock, and attempts per level
    (a level measured again takes its time again; the later ones may too)."""

    clock: Callable[[], float]
    virtual: bool  # the clock is simulated: its seconds are not the wall's
    wall0: float = field(default_factory=time.monotonic)
    clock0: float = 0.0

    def __post_init__(self) -> None:
        self.clock0 = self.clock()

    def now(self, done: Sized, retried: Sized) -> tuple[float, float]:
        """(wall seconds per clock second, expected attempts per level), from the levels ``done`` and the
        attempts ``retried`` so far."""
        ran = self.clock() - self.clock0
        wall = time.monotonic() - self.wall0
        per_s = wall / ran if self.virtual and ran > 0.1 and wall > 0 else 1.0
        return per_s, (len(done) + len(retried)) / len(done) if len(done) else 1.0
