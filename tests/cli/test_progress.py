"""Issue 55 item 4: progress that tells the truth: where the sweep stands, the time left, why a level repeats."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.cli.progress import PlainProgress, RichProgress, duration_text
from loadgen.load import Load
from loadgen.run.metrics import LevelRecorder
from loadgen.run.observe import SweepStep

runner = CliRunner()


def test_a_sweep_in_a_log_says_each_level_once_with_its_place_and_the_time_left(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", "quickstart", "--virtual-time", "-o", str(out)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("c=")]
    assert [line.split(":")[0] for line in lines] == [
        f"c={c} [{i}/7]" for i, c in enumerate((2, 4, 8, 16, 32, 48, 64), 1)
    ]
    assert all("left" in line for line in lines[:-1]) and "left" not in lines[-1]
    assert "started" not in result.stderr  # no "about 4 s" for a level its request floor makes 15


def test_virtual_time_says_the_time_left_on_the_wall(tmp_path: Path) -> None:
    """Issue 73: under --virtual-time the time left counted simulated seconds (31 s for a run of 3)."""
    started = time.monotonic()
    result = runner.invoke(app, ["sweep", "--profile", "quickstart", "--virtual-time", "-o", str(tmp_path / "s.json")])
    wall = time.monotonic() - started
    assert result.exit_code == 0, result.output
    left = [int(m) for m in re.findall(r"about (\d+) s left", result.stderr)]
    assert left and max(left) <= max(10.0, 3 * wall), (left, wall)


def _console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=200, force_terminal=False), buffer


def test_a_level_measured_again_says_why_on_both_displays() -> None:
    load = Load(kind="concurrency", value=32)
    step = SweepStep(
        load=load, index=5, count=7, attempt=2, retry_reason="client-bound: the generator's p99 lag 31 ms", this_s=6.0
    )
    for progress in (PlainProgress, RichProgress):
        console, buffer = _console()
        shown = progress(console)
        shown.on_sweep_step(step)
        shown.on_level_start(load, 4.0)
        shown.on_level_end(LevelRecorder(load, window_start=0.0).finish(4.0))
        text = buffer.getvalue()
        assert "c=32 [5/7]: measured again (attempt 2): client-bound: the generator's p99 lag 31 ms" in text, text
        assert "c=32 [5/7]: 0 done, 0 failed" in text


def test_time_left_reads_as_an_estimate() -> None:
    assert [duration_text(s) for s in (0.4, 45, 200, 3 * 3600 + 300)] == ["0 s", "45 s", "3 min", "3 h 05 min"]
