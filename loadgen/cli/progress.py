"""Progress on stderr: a live display on a terminal, one line per level in CI logs, none with --quiet.

Both say where the run stands (level 3 of 7), how long is left (each level's request floor at the rate
measured so far), and why a level is measured again.
"""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from loadgen.level.result import LevelResult
from loadgen.load import Load
from loadgen.quantity import Metric
from loadgen.run.observe import LoadSnapshot, SweepStep

HEARTBEAT_S = 60.0  # a log line this often while one level runs long, so a CI job never looks hung


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def duration_text(seconds: float) -> str:
    """``40 s``, ``3 min``, ``1 h 05 min``: a time left, as precise as an estimate deserves."""
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:02.0f} min"


def _where(step: SweepStep | None, load: Load) -> str:
    """``c=16 [4/7]`` in a sweep; the label alone for a single level."""
    if step is None or step.count <= 1:
        return load.label
    return f"{load.label} [{step.index}/{step.count}]"


def _left(step: SweepStep | None, snap: LoadSnapshot | None = None) -> str:
    """``about 3 min left`` for the whole run: the rest of this level and the later ones."""
    if step is None or step.after_s is None:
        return ""
    # the runner's planned length starts at the window asked and grows as its request floor needs: the
    # floor at the guessed rate is the better estimate until the runner's own passes it
    this, elapsed = step.this_s or 0.0, 0.0
    if snap is not None:
        this, elapsed = max(this, snap.planned_s or 0.0), snap.elapsed_s
    left = (max(this - elapsed, 0.0) + step.after_s) * step.wall_per_s
    return f"about {duration_text(left)} left" if left >= 1 else ""


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
    if snap.load.batch is not None:  # a pooling level: batches answered whole, their latency is the number
        return (
            f"{snap.elapsed_s:.0f}{total}  done {live.completed}  in flight {live.in_flight}  "
            f"latency p50/p95 {_ms(live.e2e_p50_ms)}/{_ms(live.e2e_p95_ms)} ms  errors {live.failed}"
        )
    return (
        f"{snap.elapsed_s:.0f}{total}  done {live.completed}  in flight {live.in_flight}  "
        f"{rate}  TTFT p50/p95 {_ms(live.ttft_p50_ms)}/{_ms(live.ttft_p95_ms)} ms  "
        f"TPOT p50/p95 {_ms(live.tpot_p50_ms)}/{_ms(live.tpot_p95_ms)} ms  errors {live.failed}"
    )


def _summary(result: LevelResult, step: SweepStep | None, took_s: float) -> str:
    """A finished level in one line: its counts, TTFT and TPOT p50, tok/s, how long it took, time left."""
    if result.pooling:
        inputs = result.inputs_per_s
        text = (
            f"{_where(step, result.load)}: {result.completed} done, {result.failed} failed, latency p50 "
            f"{_ms(result.percentile_ms(Metric.E2E, 50))} ms, {'-' if inputs is None else f'{inputs:,.1f}'} "
            f"inputs/s ({took_s:.0f} s)"
        )
        return _ended(text, result, step)
    ttft, tpot = result.percentile_ms(Metric.TTFT, 50), result.percentile_ms(Metric.TPOT, 50)
    tokens = result.output_tokens_per_s
    text = (
        f"{_where(step, result.load)}: {result.completed} done, {result.failed} failed, TTFT p50 {_ms(ttft)} ms, "
        f"TPOT p50 {_ms(tpot)} ms, {'-' if tokens is None else f'{tokens:,.0f}'} tok/s ({took_s:.0f} s)"
    )
    return _ended(text, result, step)


def _ended(text: str, result: LevelResult, step: SweepStep | None) -> str:
    """A finished level's line, marked interrupted, or with the time the sweep has left."""
    if not result.complete:
        return text + " (interrupted)"
    later = "" if step is None or not step.after_s else f"; about {duration_text(step.after_s * step.wall_per_s)} left"
    return text + later


def _retry_line(step: SweepStep) -> str:
    return f"{_where(step, step.load)}: measured again (attempt {step.attempt}): {step.retry_reason}"


class PlainProgress:
    """For a log, not a terminal (CI): one line per level when it ends, one per retry with its reason, and a
    line every ``every_s`` while a level runs long (a sweep in CI that prints nothing for minutes looks hung,
    and a job that looks hung gets killed)."""

    def __init__(self, console: Console, every_s: float = HEARTBEAT_S) -> None:
        self._console = console
        self._every_s = every_s
        self._planned_s: float | None = None
        self._next_s = every_s
        self._step: SweepStep | None = None
        self._started = 0.0

    def on_sweep_step(self, step: SweepStep) -> None:
        self._step = step
        if step.retry_reason:
            self._print(_retry_line(step))

    def on_level_start(self, load: Load, planned_s: float | None) -> None:
        self._planned_s, self._next_s, self._started = planned_s, self._every_s, time.monotonic()

    def on_progress(self, snap: LoadSnapshot) -> None:
        if snap.elapsed_s >= self._next_s:
            self._next_s = (snap.elapsed_s // self._every_s + 1) * self._every_s
            left = _left(self._step, snap)
            self._print(f"{_where(self._step, snap.load)}: {_status(snap, self._planned_s)}  {left}".rstrip())

    def on_level_end(self, result: LevelResult) -> None:
        self._print(_summary(result, self._step, time.monotonic() - self._started))

    def _print(self, line: str) -> None:
        self._console.print(line, highlight=False, soft_wrap=True)


class RichProgress:
    """A live display while a level runs (where the run stands and the time left, then the level's live
    numbers), and a line that stays when it ends or is measured again."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._live: Live | None = None
        self._planned_s: float | None = None
        self._step: SweepStep | None = None
        self._started = 0.0

    def on_sweep_step(self, step: SweepStep) -> None:
        self._step = step
        if step.retry_reason:
            self._console.print(_retry_line(step), style="yellow", highlight=False)

    def on_level_start(self, load: Load, planned_s: float | None) -> None:
        self._planned_s, self._started = planned_s, time.monotonic()
        self._live = Live(self._view(load, None), console=self._console, transient=True, refresh_per_second=4)
        self._live.start()

    def on_progress(self, snap: LoadSnapshot) -> None:
        if self._live is not None:
            self._live.update(self._view(snap.load, snap))

    def on_level_end(self, result: LevelResult) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._console.print(_summary(result, self._step, time.monotonic() - self._started), highlight=False)

    def _view(self, load: Load, snap: LoadSnapshot | None) -> Group:
        step = self._step
        head = f"level {step.index} of {step.count}: {load.label}" if step and step.count > 1 else load.label
        left = _left(step, snap)
        lines = [Text(f"{head}  {left}".rstrip(), style="bold")]
        if snap is None:
            lines.append(Text("starting…"))
        else:
            lines.append(Text(_status(snap, self._planned_s), style="red" if snap.live.failed else ""))
        return Group(*lines)
