"""Every request sent has an outcome: completed, failed, or cut in flight when the level ended."""

from __future__ import annotations

import json
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
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    cut = [r for r in rows if r["cut"]]
    assert level.cut > 0 and level.offered is not None
    assert len(rows) == level.offered and len(cut) == level.cut, (len(rows), len(cut), level.cut, level.offered)
    assert len(rows) - len(cut) >= level.completed + level.failed  # the window's, and those that ended after it
    # a cut row says what it streamed before the end, and carries its id to find it in the server's logs
    assert all(r["error"] is None and r["request_id"] and r["t_done"] >= r["t_sent"] for r in cut)
    assert any(r["output_tokens"] for r in cut)
