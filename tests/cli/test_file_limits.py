"""Files past what a results file holds are refused in one line, before their size costs memory."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.limits import MAX_FILE_LEVELS

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data"


def test_an_import_past_the_level_limit_is_refused_naming_it(tmp_path: Path) -> None:
    table = tmp_path / "huge.csv"
    rows = "".join(f"{c},100,20,{c / 3:.3f},128\n" for c in range(1, MAX_FILE_LEVELS + 2))
    table.write_text("concurrency,ttft_p50_ms,tpot_p50_ms,requests_per_s,output_tokens\n" + rows)
    result = runner.invoke(app, ["import", str(table), "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 2, result.output
    assert f"{MAX_FILE_LEVELS + 1:,} rows; a results file holds at most {MAX_FILE_LEVELS:,} levels" in result.output


def test_a_results_file_past_the_level_limit_or_with_a_vast_histogram_range_is_refused(tmp_path: Path) -> None:
    doc = json.loads((DATA / "results_v1.json").read_text())
    many = dict(doc, levels=doc["levels"] * (MAX_FILE_LEVELS + 1))
    wide = dict(doc, histogram_config=dict(doc["histogram_config"], highest=2**62, significant_figures=5))
    for name, body, message in (
        ("many.json", many, f"levels; a results file holds at most {MAX_FILE_LEVELS:,}"),
        ("wide.json", wide, "histogram_config: expected unit us and 1 <= lowest < highest <="),
    ):
        path = tmp_path / name
        path.write_text(json.dumps(body))
        result = runner.invoke(app, ["report", str(path)])
        assert result.exit_code == 3 and message in result.output and "Traceback" not in result.output, result.output
