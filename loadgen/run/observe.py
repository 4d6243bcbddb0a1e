"""How the library reports progress without owning a console: an observer protocol."""

from __future__ import annotations

from dataclasses import dataclass
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
