"""How the library reports progress without owning a console: an observer protocol."""

from __future__ import annotations

from typing import Protocol

from loadgen.metrics import LiveSnapshot
from loadgen.results import LevelResult, Load


class LevelObserver(Protocol):
    """Receives progress from a running level. The CLI renders it; tests may record it."""

    def on_level_start(self, load: Load, planned_s: float | None) -> None: ...

    def on_progress(self, snapshot: LoadSnapshot) -> None: ...

    def on_level_end(self, result: LevelResult) -> None: ...


class LoadSnapshot:
    """A progress tick: the live numbers plus the level's elapsed time."""

    __slots__ = ("elapsed_s", "live", "load")

    def __init__(self, load: Load, elapsed_s: float, live: LiveSnapshot) -> None:
        self.load = load
        self.elapsed_s = elapsed_s
        self.live = live


class NullObserver:
    """Observes nothing (library default, tests, worker processes)."""

    def on_level_start(self, load: Load, planned_s: float | None) -> None:
        pass

    def on_progress(self, snapshot: LoadSnapshot) -> None:
        pass

    def on_level_end(self, result: LevelResult) -> None:
        pass
