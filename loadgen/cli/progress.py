"""Live progress on stderr (rich), off when stderr is not a terminal or with --quiet."""

from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadgen.observe import LoadSnapshot
from loadgen.results import LevelResult, Load, Metric


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


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
        live = snap.live
        total = f"/{self._planned_s:.0f}s" if self._planned_s else "s"
        tok_s = live.output_tokens / snap.elapsed_s if snap.elapsed_s > 0 else 0.0
        line = (
            f"{snap.load.label}  {snap.elapsed_s:.0f}{total}  done {live.completed}  in flight {live.in_flight}  "
            f"~{tok_s:.0f} tok/s  TTFT p50/p95 {_ms(live.ttft_p50_ms)}/{_ms(live.ttft_p95_ms)} ms  "
            f"TPOT p50/p95 {_ms(live.tpot_p50_ms)}/{_ms(live.tpot_p95_ms)} ms  errors {live.failed}"
        )
        self._live.update(Text(line, style="red" if live.failed else ""))

    def on_level_end(self, result: LevelResult) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        tpot = result.percentile_ms(Metric.TPOT, 50)
        self._console.print(
            f"{result.load.label}: {result.completed} done, {result.failed} failed, "
            f"TPOT p50 {_ms(tpot)} ms" + ("" if result.complete else " (interrupted)"),
            highlight=False,
        )
