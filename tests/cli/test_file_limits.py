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


def test_a_csv_saved_with_a_byte_order_mark_imports_like_one_without(tmp_path: Path) -> None:
    # Excel writes a UTF-8 BOM: it once became part of the first column's name ("give exactly one of
    # concurrency or rate")
    plain = (DATA / "nim_llama33_70b_2xh100_fp8.csv").read_text()
    marked = tmp_path / "excel.csv"
    marked.write_text("\ufeff" + plain, encoding="utf-8")
    result = runner.invoke(app, ["import", str(marked), "-o", str(tmp_path / "r.json"), "--output-tokens", "500"])
    assert result.exit_code == 0, result.output


def test_a_trace_with_a_year_one_timestamp_an_oversized_field_or_a_far_row_is_one_line(tmp_path: Path) -> None:
    cases = {
        "azure.csv": ("TIMESTAMP,ContextTokens,GeneratedTokens\n0001-01-01 00:00:00,4,4\n0001-01-01 00:00:01,4,4\n",
                      None),
        "field.csv": ("time_s,prompt_tokens,output_tokens\n0,4," + "9" * 140_000 + "\n", "not a CSV row"),
        "far.csv": ("time_s,prompt_tokens,output_tokens\n0,4,4\n1e15,4,4\n", "a replay spans at most 30 days"),
        # issue 70, S8: a hash id of 5,000 digits was a ValueError traceback from json.loads
        "ids.jsonl": ('{"timestamp": 0, "input_length": 4, "output_length": 4, "hash_ids": [' + "7" * 5000 + "]}\n",
                      "an integer of more than 4,300 digits"),
    }  # fmt: skip
    for name, (text, message) in cases.items():
        trace = tmp_path / name
        trace.write_text(text)
        args = ["run", "--url", "sim", "--trace", str(trace), "-o", str(tmp_path / "r.json"), "--quiet"]
        result = runner.invoke(app, [*args, "--max-tokens", "2"] if message is None else args)
        assert "Traceback" not in result.output, result.output
        if message is None:
            assert result.exit_code == 0, result.output  # year 1 is a valid (if odd) origin
        else:
            assert result.exit_code == 2 and message in result.output, result.output


def test_a_cut_of_a_trace_longer_than_the_replay_limit_is_replayed(tmp_path: Path) -> None:
    from loadgen.inputs.trace import MAX_TRACE_REQUESTS, load_trace

    trace = tmp_path / "long.csv"
    rows = "".join(f"{(MAX_TRACE_REQUESTS - i) * 0.001},4,4\n" for i in range(MAX_TRACE_REQUESTS + 1))
    trace.write_text("time_s,prompt_tokens,output_tokens\n" + rows)
    cut = load_trace(trace, 2)  # the two earliest of 1,000,001 rows (the file lists them last)
    assert cut.offsets_s == (0.0, 0.001) and len(cut.prompt_tokens) == 2
