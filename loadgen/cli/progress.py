"""Progress on stderr: a live line on a terminal, a plain line every few seconds in CI logs, none with --quiet."""

from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadgen.load import Load
from loadgen.results import LevelResult, Metric
from loadgen.run.observe import LoadSnapshot


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _status(snap: LoadSnapshot, planned_s: float | None) -> str:
    """The live line. The planned length is the runner's current one (a request floor lengthens a level);
    tok/s is the measured window's, as the result will count it (warm-up excluded)."""
    live = snap.live
    planned = snap.planned_s if snap.planned_s is not None else planned_s
    total = f"/{planned:.0f}s" if planned else "s"
    if snap.window_s is None:  # the runner did not say (Ray actors): every token over the elapsed time
        rate = f"~{live.output_tokens / snap.elapsed_s if snap.elapsed_s > 0 else 0.0:.0f} tok/s"
    elif snap.window_s > 0:
        rate = f"~{live.window_output_tokens / snap.window_s:.0f} tok/s"
    else:
        rate = "warm-up"
    return (
        f"{snap.load.label}  {snap.elapsed_s:.0f}{total}  done {live.completed}  in flight {live.in_flight}  "
        f"{rate}  TTFT p50/p95 {_ms(live.ttft_p50_ms)}/{_ms(live.ttft_p95_ms)} ms  "
        f"TPOT p50/p95 {_ms(live.tpot_p50_ms)}/{_ms(live.tpot_p95_ms)} ms  errors {live.failed}"
    )


def _summary(result: LevelResult) -> str:
    tpot = result.percentile_ms(Metric.TPOT, 50)
    return f"{result.load.label}: {result.completed} done, {result.failed} failed, TPOT p50 {_ms(tpot)} ms" + (
        "" if result.complete else " (interrupted)"
    )


class PlainProgress:
    """For a log, not a terminal (CI): a line when a level starts, every ``every_s`` seconds, and at its end.

    A sweep in CI otherwise prints nothing for minutes, and a job that looks
    hung gets killed.
    """

    def __init__(self, console: Console, every_s: float = 10.0) -> None:
        self._console = console
        self._every_s = every_s
        self._planned_s: float | None = None
        self._next_s = every_s

    def on_level_start(self, load: Load, planned_s: float | None) -> None:
        self._planned_s, self._next_s = planned_s, self._every_s
        planned = f" (about {planned_s:.0f} s)" if planned_s else ""
        self._console.print(f"{load.label}: started{planned}", highlight=False, soft_wrap=True)

    def on_progress(self, snap: LoadSnapshot) -> None:
        if snap.elapsed_s >= self._next_s:
            self._next_s = (snap.elapsed_s // self._every_s + 1) * self._every_s
            self._console.print(_status(snap, self._planned_s), highlight=False, soft_wrap=True)

    def on_level_end(self, result: LevelResult) -> None:
        self._console.print(_summary(result), highlight=False, soft_wrap=True)


class RichProgress:
    """One live status line per level, then a one-line summary when it ends."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._live: Live | None = None
        self._planned_s: float | None = None

    def on_level_start(self, load: Load, planned_s: float | None) -> None:
        self._planned_s = planned_s
        self._live = Live(Text(f"{load.label}  starting…"), console=self._console, transient=True, refresh_per_second=4)
        self._live.start()

    def on_progress(self, snap: LoadSnapshot) -> None:
        if self._live is None:
            return
        self._live.update(Text(_status(snap, self._planned_s), style="red" if snap.live.failed else ""))

    def on_level_end(self, result: LevelResult) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._console.print(_summary(result), highlight=False)
