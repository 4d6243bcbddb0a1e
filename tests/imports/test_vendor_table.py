"""A vendor's table planned as published, nothing invented (issue 24, items 1-3).

``tests/data/nim_llama33_70b_2xh100_fp8.csv``: NVIDIA NIM 1.8.0, Llama-3.3-70B on 2x H100 FP8 TP2,
5,000 prompt / 500 output tokens per request, as published: concurrency, mean TTFT, mean ITL and
output tok/s; no requests/s, no E2E, no percentile. ``..._mixes.csv``: the same deployment's whole table,
five prompt/output mixes (zivbeker42/llm-guesstimator, tested_benchmarks/).
"""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.quantity import Metric
from loadgen.results import load
from planner import PlanRequest, plan_from_results
from planner.ci.gate import evaluate_gate, parse_check

runner = CliRunner()
TABLE = Path(__file__).parents[1] / "data" / "nim_llama33_70b_2xh100_fp8.csv"


def _import(tmp_path: Path, table: Path, *flags: str) -> Path:
    out = tmp_path / "imported.json"
    done = runner.invoke(app, ["import", str(table), "-o", str(out), *flags])
    assert done.exit_code == 0, done.output
    return out


def test_requests_per_s_come_from_the_table_never_a_default(tmp_path: Path) -> None:
    results = load(_import(tmp_path, TABLE))
    rows = list(csv.DictReader(TABLE.open()))
    for level, row in zip(results.levels, rows):
        assert level.requests_per_s == pytest.approx(float(row["output_tokens_per_s"]) / 500, rel=1e-3)
        assert level.output_tokens_per_s == pytest.approx(float(row["output_tokens_per_s"]), rel=1e-9)
        assert level.output_tokens / level.completed == pytest.approx(500, abs=0.5)
        assert level.requests_per_s != pytest.approx(1000 / 60)  # the old invented 16.67 req/s


def test_the_plateau_is_sequences_and_the_law_is_the_tables_own_littles_law(tmp_path: Path) -> None:
    plan = plan_from_results(load(_import(tmp_path, TABLE)), PlanRequest(qps=2, output_tokens=500))
    rows = list(csv.DictReader(TABLE.open()))
    tok_s = np.array([float(r["output_tokens_per_s"]) for r in rows])
    itl = np.array([float(r["itl_mean_ms"]) for r in rows])
    batch = tok_s * itl / 1000  # Little's law on tokens: sequences decoding at once
    slope, base = np.polyfit(batch[:5], itl[:5], 1)  # the unsaturated rows, c <= 100
    assert plan.saturation is not None and plan.saturation.max_batch == pytest.approx(85.5, abs=2)
    assert plan.fit is not None and plan.fit_statistic == "tpot_mean"
    assert plan.fit.per_seq_ms == pytest.approx(slope, rel=0.05) and plan.fit.base_ms == pytest.approx(base, rel=0.05)
    assert plan.recommended_replicas == 2  # 1,000 tok/s against ~920 per replica


def test_a_table_without_requests_per_s_or_tokens_per_request_is_refused_by_name(tmp_path: Path) -> None:
    bare = tmp_path / "bare.csv"
    bare.write_text("\n".join(",".join(line.split(",")[:4]) for line in TABLE.read_text().splitlines()) + "\n")
    refused = runner.invoke(app, ["import", str(bare), "-o", str(tmp_path / "x.json")])
    assert refused.exit_code == 2
    text = " ".join(refused.output.split())
    assert "bare.csv: level c=1: requests/s is neither given nor derivable" in text and "--output-tokens" in text
    results = load(_import(tmp_path, bare, "--output-tokens", "500"))
    assert results.levels[0].requests_per_s == pytest.approx(51.67 / 500, rel=1e-3)


def test_a_percentile_the_source_never_had_is_absent_everywhere(tmp_path: Path) -> None:
    results = load(_import(tmp_path, TABLE))
    level = results.levels[0]
    assert level.mean_ms(Metric.TPOT) == pytest.approx(18.58, rel=0.01)  # TPOT mean = the table's mean ITL
    assert level.percentile_ms(Metric.TPOT, 95) is None and level.percentile_ms(Metric.TPOT, 50) is None
    verdict = evaluate_gate(results, [parse_check("tpot_p95<40ms")])
    assert all(r.value is None and not r.passed for r in verdict.checks)
    assert {r.absent for r in verdict.checks} == {"tpot_p95 not in the imported file"}


@pytest.mark.parametrize(("slo", "batch"), [("tpot_mean<40ms", 25), ("tpot_mean<60ms", 48)])
def test_an_slo_on_the_mean_the_table_publishes_is_planned_and_a_p95_it_does_not_is_absent(
    tmp_path: Path, slo: str, batch: int
) -> None:
    imported = str(_import(tmp_path, TABLE))
    done = runner.invoke(app, ["plan", imported, "--slo", slo, "--qps", "2", "--output-tokens", "500", "--explain"])
    assert done.exit_code == 0, done.output
    text = " ".join(done.stdout.split())
    assert f"max batch {batch} (measured {batch}, model {batch}) [unknown]" in text
    assert "recommended: 2 replicas" in text and "fitted on TPOT mean" in text
    absent = runner.invoke(app, ["plan", imported, "--slo", "tpot_p95<60ms", "--explain"])
    assert "tpot_p95_ms <= 60: max batch none [insufficient range]; tpot_p95 not in the imported file" in " ".join(
        absent.stdout.split()
    )


def test_the_sources_figures_are_carried_exactly_and_its_c1_level_gives_the_prefill(tmp_path: Path) -> None:
    """Item 4: a figure is read back as the file gave it, not off a 3-significant-digit histogram."""
    results = load(_import(tmp_path, TABLE))
    rows = list(csv.DictReader(TABLE.open()))
    for level, row in zip(results.levels, rows):
        assert level.mean_ms(Metric.TTFT) == float(row["ttft_mean_ms"])
        assert level.mean_ms(Metric.ITL) == float(row["itl_mean_ms"])
    plan = plan_from_results(results, PlanRequest(qps=2, output_tokens=500))
    assert plan.prefill is not None and plan.prefill.source == "fitted from TTFT at c=1"
    assert plan.decode is not None and 0 < plan.decode.per_seq_ms < plan.fit.per_seq_ms  # type: ignore[union-attr]


MIXES = Path(__file__).parents[1] / "data" / "nim_llama33_70b_2xh100_fp8_mixes.csv"


def _mix_files(tmp_path: Path, *mixes: tuple[int, int]) -> list[str]:
    """One imported file per published mix, as a user splits the table."""
    rows = list(csv.DictReader(MIXES.open()))
    paths = []
    for prompt, output in mixes:
        table = tmp_path / f"m{prompt}_{output}.csv"
        mine = [r for r in rows if (int(r["prompt_tokens"]), int(r["output_tokens"])) == (prompt, output)]
        with table.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(mine)
        out = tmp_path / f"m{prompt}_{output}.json"
        assert runner.invoke(app, ["import", str(table), "-o", str(out)]).exit_code == 0
        paths.append(str(out))
    return paths


def _published_max_batch(limit_ms: float) -> int:
    """The largest concurrency whose mean ITL the 1,000/1,000 rows put under the limit (linear between rows)."""
    rows = [r for r in csv.DictReader(MIXES.open()) if (r["prompt_tokens"], r["output_tokens"]) == ("1000", "1000")]
    points = [(float(r["concurrency"]), float(r["itl_mean_ms"])) for r in rows]
    for (c0, t0), (c1, t1) in itertools.pairwise(points):
        if t1 > limit_ms >= t0:
            return int(c0 + (c1 - c0) * (limit_ms - t0) / (t1 - t0))
    raise AssertionError("the limit is outside the table")


def test_an_output_length_not_calibrated_is_refused_with_the_sweep_that_answers_it_until_a_third_mix(
    tmp_path: Path,
) -> None:
    # Calibrated at 200/200 and 5,000/500, asked 1,000/1,000: the fit splits the two slopes into KV and
    # prefill by the prefill a lone prompt cost (TTFT at c=1), and read a max batch of 83 where the published
    # rows give 74. Any split into non-negative terms is as good, and its high end allows 35, under half the
    # law's own answer: no batch to act on, and the sweep that would pin it named.
    truth = _published_max_batch(30.0)
    assert truth == 74
    ask = ["--prompt-tokens", "1000", "--output-tokens", "1000", "--slo", "tpot_mean<30ms", "--no-simulate"]
    two = runner.invoke(app, ["plan", *_mix_files(tmp_path, (200, 200), (5000, 500)), *ask, "--json"])
    assert two.exit_code == 0, two.output
    plan = json.loads(two.stdout)
    assert plan["max_batch"] is None
    note = plan["slo"][0]["note"]
    assert "too unsure to act on" in note and "split into KV and prefill terms several ways" in note
    assert "prompt 1000 / output 1000 tokens at concurrency 1,4," in note and "--prompt-tokens 1000" in note
    # a third mix off the line of the first two narrows the range: safe, and close enough to act on
    three = _mix_files(tmp_path, (200, 200), (5000, 500), (500, 2000))
    narrowed = json.loads(runner.invoke(app, ["plan", *three, *ask, "--json"]).stdout)["max_batch"]
    assert 0.6 * truth <= narrowed <= truth


def test_a_level_given_twice_is_refused_naming_its_load_and_both_rows(tmp_path: Path) -> None:
    table = tmp_path / "twice.csv"
    table.write_text(
        "concurrency,ttft_mean_ms,itl_mean_ms,output_tokens_per_s,prompt_tokens,output_tokens\n"
        "1,10,5,200,100,100\n4,12,6,700,100,100\n4,13,6,710,100,100\n"
    )
    refused = runner.invoke(app, ["import", str(table), "-o", str(tmp_path / "out.json")])
    assert refused.exit_code == 2
    assert "same load c=4 (twice.csv row 3 and twice.csv row 4)" in refused.stderr


def test_notes_several_calibration_files_share_are_said_once_naming_the_files(tmp_path: Path) -> None:
    ask = ["--prompt-tokens", "1000", "--output-tokens", "1000", "--slo", "tpot_mean<30ms", "--no-simulate"]
    files = _mix_files(tmp_path, (200, 200), (5000, 500), (500, 2000))
    planned = runner.invoke(app, ["plan", *files, *ask])
    assert planned.exit_code == 0, planned.output
    text = " ".join(planned.stdout.split())
    # the two files measured at the same levels share one line; the third (no c=250 row) keeps its own
    assert text.count("request count not given") == 2
    assert "m200_200.json, m5000_500.json: c=1, c=5, c=25, c=50, c=100, c=150, c=200, c=250: request count" in text


def test_next_sweep_prints_the_one_sweep_that_pins_a_mix_plan_and_refuses_a_single_sweep(tmp_path: Path) -> None:
    ask = ["--prompt-tokens", "1000", "--output-tokens", "1000", "--slo", "tpot_mean<30ms", "--no-simulate"]
    files = _mix_files(tmp_path, (200, 200), (5000, 500))
    said = runner.invoke(app, ["plan", *files, *ask, "--next-sweep"])
    assert said.exit_code == 0, said.output
    assert said.stdout.startswith("for prompt 1000 / output 1000: the sweep that answers it: prompt 1000 / output 1000")
    assert "--levels 1,4,8,16,32,64,126" in said.stdout and len(said.stdout.splitlines()) == 1
    alone = runner.invoke(app, ["plan", files[0], "--slo", "tpot_mean<30ms", "--next-sweep"])
    assert alone.exit_code == 2 and "--next-sweep names the sweep that pins a plan for a mix" in alone.stderr
