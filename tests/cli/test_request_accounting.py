"""Every request sent has an outcome: completed, failed, or cut in flight when the level ended."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load

runner = CliRunner()


def test_an_overloaded_open_loop_level_accounts_for_every_arrival(tmp_path: Path) -> None:
    # issue 30 item 4: 165 arrivals scheduled, 153 records, errors {}: the 12 cut at the drain limit left
    # no trace. 300/s against a simulator that serves ~50/s: a queue, then a drain that cannot empty it.
    out, records = tmp_path / "r.json", tmp_path / "records.jsonl"
    args = ["run", "--url", "sim", "--virtual-time", "--rate", "300", "--duration", "5", "--warmup", "0",
            "--max-tokens", "32", "--records", str(records), "-o", str(out), "--quiet"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 3) and out.exists(), result.output  # 3: an overloaded level is not steady
    level = load(out).levels[0]
    written = records.read_text().count("\n")
    assert level.cut > 0 and level.offered is not None
    assert written + level.cut == level.offered, (written, level.cut, level.offered)
