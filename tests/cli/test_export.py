"""``loadgen export``: levels (a row per model where requests were split) and per-request records as CSV or
Parquet, and levels as llm-d-benchmark reports; every number the same one the results hold."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.quantity import Metric
from loadgen.results import load
from loadgen.run.records_table import read_records

runner = CliRunner()


@pytest.fixture(scope="module")
def split_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("export")
    results, records = folder / "r.json", folder / "r.jsonl"
    args = ["run", "--url", "sim", "--virtual-time", "--models", "a=3,b=1", "--requests", "40", "--concurrency",
            "4", "--prompt-tokens", "32", "--max-tokens", "8", "--scrape-metrics", "on", "-o", str(results),
            "--records", str(records), "--quiet"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return results, records


def export(*args: str) -> str:
    result = runner.invoke(app, ["export", *args])
    assert result.exit_code == 0, result.output
    return result.stderr


def test_levels_as_csv_have_a_row_per_model_beside_the_level(split_run: tuple[Path, Path], tmp_path: Path) -> None:
    results_file, _ = split_run
    out = tmp_path / "levels.csv"
    assert "3 row(s) written" in export(str(results_file), "-o", str(out))
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    level = load(results_file).levels[0]
    assert [(r["level"], r["model"]) for r in rows] == [("c=4", ""), ("c=4", "a"), ("c=4", "b")]
    assert float(rows[0]["ttft_p50_ms"]) == level.summary()["ttft_ms"]["p50"]
    assert int(rows[1]["completed"]) + int(rows[2]["completed"]) == level.completed
    assert rows[1]["output_tokens_per_s"] == ""  # the level's throughput is not split per model
    assert float(rows[2]["tpot_p95_ms"]) == level.summary()["by_model"]["b"]["tpot_ms"]["p95"]


def test_records_as_parquet_hold_each_requests_metrics_and_token_times(
    split_run: tuple[Path, Path], tmp_path: Path
) -> None:
    _, records_file = split_run
    out = tmp_path / "requests.parquet"
    assert "request(s) written" in export(str(records_file), "--format", "parquet", "-o", str(out))
    table = pq.read_table(out).to_pylist()
    records = read_records(records_file)
    assert len(table) == len(records)
    first = next(row for row in table if row["ok"])
    (label, record) = next((lbl, r) for lbl, r in records if r.ok)
    assert first["load"] == label == "c=4" and first["model"] in ("a", "b")
    assert record.t_first is not None
    assert first["ttft_ms"] == pytest.approx((record.t_first - record.t_intended) * 1000, abs=1e-3)
    assert first["chunk_times"] == list(record.chunk_times) and first["token_events"] == 8


def test_levels_as_llmd_reports(split_run: tuple[Path, Path], tmp_path: Path) -> None:
    results_file, _ = split_run
    out = tmp_path / "llmd.yaml"
    export(str(results_file), "--format", "llm-d", "-o", str(out))
    (report,) = list(yaml.safe_load_all(out.read_text()))
    level = load(results_file).levels[0]
    assert report["version"] == "0.1" and report["scenario"]["load"]["args"]["concurrency"] == 4
    assert report["scenario"]["model"]["adapters"] == [{"name": "a"}, {"name": "b"}]
    ttft = report["metrics"]["latency"]["time_to_first_token"]
    assert ttft["units"] == "ms" and ttft["mean"] == pytest.approx(level.mean_ms(Metric.TTFT))
    assert ttft["p99p9"] == pytest.approx(level.percentile_ms(Metric.TTFT, 99.9))
    assert report["metrics"]["latency"]["time_per_output_token"]["units"] == "ms/token"
    assert report["metrics"]["requests"] == {"total": 40, "failures": 0, "incomplete": 0,
                                             "input_length": {"units": "count", "mean": 32.0},
                                             "output_length": {"units": "count", "mean": 8.0}}  # fmt: skip
    assert report["metrics"]["throughput"]["output_tokens_per_sec"] == pytest.approx(level.output_tokens_per_s)
    assert report["metrics"]["service"]["batch_size"]["units"] == "count"


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ('{"t_intended": 1, "t_sent": 1, "t_done": 2}\n{"t_intended": "x"}\n', [], "r.jsonl:2: not a loadgen request"),
        ('{"t_intended": 1, "t_sent": 1, "t_done": 2, "error": "nope"}\n', [], "r.jsonl:1: a field of the wrong type"),
        ('{"t_intended": 1, "t_sent": 1, "t_done": 2}\n', ["--format", "llm-d"], "--format llm-d reports a results"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, content: str, args: list[str], message: str) -> None:
    source = tmp_path / "r.jsonl"
    source.write_text(content)
    result = runner.invoke(app, ["export", str(source), *args, "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.output


def test_a_model_name_a_spreadsheet_would_run_is_written_as_text(split_run: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 70, S6: model names that start with = + - @ went into the CSV raw (formula injection)."""
    results_file, _ = split_run
    raw = json.loads(results_file.read_text())
    hostile = "=cmd|' /C calc'!A0"
    models = raw["levels"][0]["by_model"]
    models[hostile] = models.pop("b")
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps(raw))
    out = tmp_path / "levels.csv"
    export(str(planted), "-o", str(out))
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["model"] for r in rows] == ["", "a", "'" + hostile]
    assert all(not cell.startswith(("=", "+", "@")) for r in rows for cell in r.values())
