"""Planning from numbers loadgen did not measure: a per-level table and vLLM bench serve JSON."""

from __future__ import annotations

import csv
import gzip
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import UsageError
from loadgen.inputs.imports import synthesise
from loadgen.inputs.textfiles import read_text
from loadgen.results import load

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data"
LEVELS = (1, 2, 4, 8, 16, 32, 48, 64)
CAP = 32  # the server's max running batch: past it, requests wait and throughput plateaus
OUT = 128  # output tokens per request
PREFILL_MS = 20.0


def step_ms(b: float) -> float:
    return 25 + 0.4 * b


def law_table(with_batch: bool) -> list[dict[str, float]]:
    """What a tool would report per level from a server that follows the law exactly."""
    rows = []
    for c in LEVELS:
        b = min(c, CAP)
        decode_ms = (OUT - 1) * step_ms(b)
        rps = b / ((PREFILL_MS + decode_ms) / 1000)  # b slots, each busy prefill + decode per request
        e2e_ms = c / rps * 1000  # closed loop: c in the system (Little's law)
        ttft_ms = e2e_ms - decode_ms
        row = {"concurrency": c, "ttft_p50_ms": ttft_ms, "ttft_mean_ms": ttft_ms, "ttft_p95_ms": ttft_ms * 1.1,
               "tpot_p50_ms": step_ms(b), "tpot_p95_ms": step_ms(b) * 1.02, "itl_p50_ms": step_ms(b),
               "itl_p99_ms": step_ms(b), "e2e_mean_ms": e2e_ms, "output_tokens_per_s": rps * OUT,
               "requests_per_s": rps, "completed": 2000, "output_tokens": OUT}  # fmt: skip
        if with_batch:
            row["running_batch"] = b
        rows.append(row)
    return rows


def write_csv(path: Path, rows: list[dict[str, float]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_synthesised_samples_answer_the_given_percentiles_and_mean() -> None:
    values = synthesise({50: 40.0, 95: 80.0, 99: 120.0}, mean=45.0, n=10_000)
    assert np.percentile(values, [50, 95, 99]) == pytest.approx([40.0, 80.0, 120.0], rel=0.01)
    assert values.mean() == pytest.approx(45.0, rel=0.001)


def test_a_law_table_with_a_plateau_plans_to_the_law_the_knee_and_the_itl_batch(tmp_path: Path) -> None:
    table, imported = tmp_path / "levels.csv", tmp_path / "imported.json"
    write_csv(table, law_table(with_batch=True))
    done = runner.invoke(app, ["import", str(table), "-o", str(imported), "--model", "m"])
    assert done.exit_code == 0, done.output
    results = load(imported)
    assert (results.settings.imported or {})["format"] == "table" and len(results.levels) == 8
    planned = runner.invoke(app, ["plan", str(imported), "--slo", "itl_p99<35.5ms", "--json"])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    assert plan["batch_axis"] == "server"
    assert plan["fit"]["base_ms"] == pytest.approx(25.0, abs=0.1)
    assert plan["fit"]["per_seq_ms"] == pytest.approx(0.4, abs=0.005)
    states = [lv["state"] for lv in plan["saturation"]["levels"]]
    assert states == ["unsaturated"] * 5 + ["knee", "saturated", "saturated"]
    assert plan["saturation"]["max_batch"] == pytest.approx(32, abs=0.5)
    (limit,) = plan["slo"]
    assert limit["batch"] == 26 and limit["quality"] == "unknown"  # 25 + 0.4 * 26 = 35.4 ms; 27 gives 35.8


def test_a_vendor_table_without_a_batch_takes_it_from_littles_law(tmp_path: Path) -> None:
    rows = [{k: v for k, v in row.items() if k not in ("completed", "output_tokens")} for row in law_table(False)]
    table, imported = tmp_path / "vendor.json", tmp_path / "imported.json"
    table.write_text(json.dumps(rows))
    done = runner.invoke(app, ["import", str(table), "-o", str(imported)])
    assert done.exit_code == 0, done.output
    assert "request count not given: each histogram holds 1000 synthesised points" in " ".join(done.stderr.split())
    plan = json.loads(runner.invoke(app, ["plan", str(imported), "--slo", "itl_p99<35ms", "--json"]).stdout)
    assert plan["batch_axis"] == "littles_law"
    assert plan["saturation"]["max_batch"] == pytest.approx(32, rel=0.02)
    assert plan["slo"][0]["batch"] in (24, 25)  # the decoding batch excludes prefill: a hair under c


def test_vllm_bench_serve_results_plan(tmp_path: Path) -> None:
    # The keys vLLM's `bench serve --save-result` writes (one file per run), from the same law.
    files = []
    for row in law_table(False)[:6]:
        doc = {"backend": "vllm", "model_id": "m", "max_concurrency": row["concurrency"], "request_rate": float("inf"),
               "duration": 2000 / row["requests_per_s"], "completed": 2000, "total_input_tokens": 2000 * 64,
               "total_output_tokens": 2000 * OUT, "request_throughput": row["requests_per_s"],
               "output_throughput": row["output_tokens_per_s"], "mean_ttft_ms": row["ttft_mean_ms"],
               "median_ttft_ms": row["ttft_p50_ms"], "p99_ttft_ms": row["ttft_p95_ms"],
               "mean_tpot_ms": row["tpot_p50_ms"], "median_tpot_ms": row["tpot_p50_ms"],
               "p99_tpot_ms": row["tpot_p95_ms"], "mean_itl_ms": row["itl_p50_ms"], "median_itl_ms": row["itl_p50_ms"],
               "p99_itl_ms": row["itl_p99_ms"], "mean_e2el_ms": row["e2e_mean_ms"],
               "median_e2el_ms": row["e2e_mean_ms"], "p99_e2el_ms": row["e2e_mean_ms"]}  # fmt: skip
        path = tmp_path / f"vllm-c{row['concurrency']}.json"
        path.write_text(json.dumps(doc))  # request_rate inf is written as Infinity, as Python's json does
        files.append(str(path))
    imported = tmp_path / "imported.json"
    done = runner.invoke(app, ["import", *files, "-o", str(imported)])
    assert done.exit_code == 0, done.output
    results = load(imported)
    assert (results.settings.imported or {})["format"] == "vllm-bench"
    assert [lv.load.value for lv in results.levels] == [1, 2, 4, 8, 16, 32]
    assert results.levels[0].summary()["prompt_tokens_mean"] == pytest.approx(64)
    plan = json.loads(runner.invoke(app, ["plan", str(imported), "--slo", "tpot_p99<35ms", "--json"]).stdout)
    assert plan["fit"]["per_seq_ms"] == pytest.approx(0.4, abs=0.01)
    # p99 TPOT is the law x 1.02: 1.02 * (25 + 0.4 * 23) = 34.9 ms, 24 gives 35.3
    assert plan["slo"][0]["batch"] == 23 and plan["slo"][0]["quality"] == "unknown"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("concurrency,tpot_p50_ms\n4,30\n", "give output_tokens_per_s or requests_per_s"),
        ("concurrency,rate,tpot_p50_ms,requests_per_s\n4,2,30,1\n", "exactly one of concurrency or rate"),
        ("concurrency,tpot_p50_ms,requests_per_s\n4,fast,1\n", "tpot_p50_ms: expected a number"),
        ("concurrency,tpot_p50_msec,requests_per_s\n4,30,1\n", "tpot_p50_msec: unknown column"),
        ("concurrency,ttft_p50_ms,requests_per_s\n4,30,1\n", "at least one TPOT or ITL latency"),
        ("concurrency,tpot_p50_ms,requests_per_s\n1,25,1,99\n", "4 fields, the header names 3"),
        ("concurrency,tpot_p50_ms,requests_per_s,duration_s\n1,25,1e308,1e308\n", "requests_per_s: expected a number"),
        ("concurrency,tpot_p50_ms,requests_per_s,duration_s\n1,25,1,1e308\n", "duration_s: expected a number"),
        ("concurrency,tpot_p50_ms,requests_per_s\n1,25," + "9" * 140_000 + "\n", "not CSV this reader takes"),
        ("concurrency,tpot_p50_ms,requests_per_s\n1e9,25,1\n", "must be a finite number in (0, 100,000]"),
    ],
)
def test_a_bad_table_is_one_line_naming_the_row_and_column(tmp_path: Path, content: str, message: str) -> None:
    table = tmp_path / "t.csv"
    table.write_text(content)
    result = runner.invoke(app, ["import", str(table), "-o", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and message in result.stderr and "row 2" in result.stderr
    assert "Traceback" not in result.output


def test_guidellm_benchmarks_plan(tmp_path: Path) -> None:
    # GuideLLM's benchmarks.json: one benchmark per level, "successful" stats, request_latency in seconds
    benches = []
    for row in law_table(False)[:6]:
        stats = {"mean": row["tpot_p50_ms"], "median": row["tpot_p50_ms"], "percentiles": {"p95": row["tpot_p95_ms"]}}
        benches.append({
            "config": {"strategy": {"type_": "concurrent", "streams": row["concurrency"]}},
            "duration": 2000 / row["requests_per_s"],
            "metrics": {
                "request_totals": {"successful": 2000, "errored": 0},
                "requests_per_second": {"successful": {"mean": row["requests_per_s"]}},
                "output_tokens_per_second": {"successful": {"mean": row["output_tokens_per_s"]}},
                "time_to_first_token_ms": {"successful": {"mean": row["ttft_mean_ms"], "median": row["ttft_p50_ms"]}},
                "time_per_output_token_ms": {"successful": stats},
                "inter_token_latency_ms": {"successful": {"median": row["itl_p50_ms"], "p99": row["itl_p99_ms"]}},
                "request_latency": {"successful": {"mean": row["e2e_mean_ms"] / 1000}},
            },
        })  # fmt: skip
    path, imported = tmp_path / "benchmarks.json", tmp_path / "imported.json"
    path.write_text(json.dumps({"benchmarks": benches}))
    done = runner.invoke(app, ["import", str(path), "-o", str(imported)])
    assert done.exit_code == 0, done.output
    results = load(imported)
    assert (results.settings.imported or {})["format"] == "guidellm" and len(results.levels) == 6
    plan = json.loads(runner.invoke(app, ["plan", str(imported), "--slo", "tpot_p95<35ms", "--json"]).stdout)
    assert plan["fit"]["per_seq_ms"] == pytest.approx(0.4, abs=0.01)
    assert plan["slo"][0]["batch"] == 23  # 1.02 * (25 + 0.4 * 23) = 34.9 ms


def test_aiperf_exports_plan(tmp_path: Path) -> None:
    # AIPerf's profile_export_aiperf.json, one per run; its inter_token_latency is a per-request TPOT
    files = []
    for row in law_table(False)[:6]:
        doc = {
            "input_config": {"loadgen": {"concurrency": row["concurrency"]}},
            "request_count": {"avg": 2000},
            "request_throughput": {"unit": "requests/sec", "avg": row["requests_per_s"]},
            "output_token_throughput": {"unit": "tokens/sec", "avg": row["output_tokens_per_s"]},
            "time_to_first_token": {"unit": "ms", "avg": row["ttft_mean_ms"], "p50": row["ttft_p50_ms"]},
            "inter_token_latency": {"unit": "ms", "avg": row["tpot_p50_ms"], "p50": row["tpot_p50_ms"],
                                    "p95": row["tpot_p95_ms"]},
            "request_latency": {"unit": "ms", "avg": row["e2e_mean_ms"]},
            "output_sequence_length": {"unit": "tokens", "avg": OUT},
        }  # fmt: skip
        path = tmp_path / f"aiperf-c{row['concurrency']}.json"
        path.write_text(json.dumps(doc))
        files.append(str(path))
    imported = tmp_path / "imported.json"
    done = runner.invoke(app, ["import", *files, "-o", str(imported)])
    assert done.exit_code == 0, done.output
    results = load(imported)
    assert (results.settings.imported or {})["format"] == "aiperf"
    assert [lv.load.value for lv in results.levels] == [1, 2, 4, 8, 16, 32]
    plan = json.loads(runner.invoke(app, ["plan", str(imported), "--slo", "tpot_p95<35ms", "--json"]).stdout)
    assert plan["batch_axis"] == "littles_law" and plan["slo"][0]["batch"] == 23


def test_an_open_loop_row_without_e2e_or_batch_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("rate,tpot_p50_ms,requests_per_s\n4,30,4\n")
    result = runner.invoke(app, ["import", str(table), "-o", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "needs e2e_mean_ms" in result.stderr


@pytest.mark.parametrize(
    "doc",
    [
        {"median_ttft_ms": 1, "median_tpot_ms": 20, "max_concurrency": 10**400, "completed": 10, "duration": 10},
        {"benchmarks": [{"metrics": {"time_per_output_token_ms": {"successful": {"mean": 5}}},
                         "config": {"strategy": {"streams": 10**400}}}]},
        {"time_to_first_token": {"avg": 5}, "input_config": {"loadgen": {"concurrency": 10**400}}},
    ],
)  # fmt: skip
def test_a_load_past_a_floats_range_is_one_line(tmp_path: Path, doc: dict[str, object]) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["import", str(path), "-o", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "must be a finite number in" in result.stderr, result.output
    assert "Traceback" not in result.output


def test_json_nested_past_the_parser_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 300_000 + "]" * 300_000)
    result = runner.invoke(app, ["import", str(path), "-o", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "nested too deeply" in result.stderr and "Traceback" not in result.output


def test_a_small_gzip_that_unpacks_huge_is_refused_at_a_multiple_of_its_size(tmp_path: Path) -> None:
    """Issue 70 S10: a 1.1 MB .jsonl.gz of 1 GiB of spaces cost 2.1 GB before it was refused; now a gzip
    is read to at most 100x its size (64 MiB at least), a piece at a time."""
    bomb = tmp_path / "trace.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as out:
        for _ in range(100):
            out.write(b" " * (2 << 20))  # 200 MiB of spaces, packed to about 200 kB
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match=r"unpacks to more than 67,108,864 bytes \(a gzip bomb\?"):
            read_text(bomb, "--trace")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 80 << 20, peak  # the 64 MiB read before the refusal, not the 200 MiB (twice) of before
    text = tmp_path / "t.jsonl.gz"
    text.write_bytes(gzip.compress("é".encode() * 300_000 + b"\xff"))
    with pytest.raises(UsageError, match=r"not UTF-8 text \(invalid start byte at byte 600000\)"):
        read_text(text)  # the offset in the whole text, not in the piece it was found in


def test_a_gzipped_export_imports_as_its_text_and_a_bomb_is_refused_as_it_unpacks(tmp_path: Path) -> None:
    """Issue 55: importing a .json.gz failed with a raw UTF-8 decoding error."""
    source = sorted((DATA / "vllm_bench").glob("*.json"))[0]
    packed = tmp_path / (source.name + ".gz")
    packed.write_bytes(gzip.compress(source.read_bytes()))
    plain = runner.invoke(app, ["import", str(source), "-o", str(tmp_path / "a.json")])
    unpacked = runner.invoke(app, ["import", str(packed), "-o", str(tmp_path / "b.json")])
    assert plain.exit_code == unpacked.exit_code == 0, unpacked.output
    assert load(tmp_path / "a.json").levels[0].summary() == load(tmp_path / "b.json").levels[0].summary()
    table = tmp_path / "t.csv.gz"
    table.write_bytes(gzip.compress(b"concurrency,tpot_p50_ms,requests_per_s\n1,25,1\n2,26,2\n"))
    assert runner.invoke(app, ["import", str(table), "-o", str(tmp_path / "c.json")]).exit_code == 0
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * 1_000_000 + b"[]"))
    with pytest.raises(UsageError, match="unpacks to more than 100,000 bytes"):
        read_text(bomb, most=100_000)  # refused as it unpacks, not after
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress(b"[1, 2]")[:12])
    assert "a broken gzip file" in runner.invoke(app, ["import", str(broken), "-o", str(tmp_path / "e.json")]).stderr
