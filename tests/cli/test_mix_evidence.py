"""A mix plan on the evidence there is: tables of means only (most vendors'), the KV cache's size as the
server's /metrics says it, and predicted levels that carry their intervals and the server's batch cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.quantity import Metric
from loadgen.results import Results, load, save_atomic
from loadgen.sim.openai_app import SimOptions
from tests.virtual import run_virtual

runner = CliRunner()
LAW = EngineConfig(
    base_ms=15.0, per_seq_ms=0.3, per_kv_ms=0.6, prefill_ms_per_token=0.03, max_num_seqs=64, kv_capacity_tokens=40_000
)
MIX = ["--prompt-tokens", "1024", "--output-tokens", "96"]


def _sweep(prompt: int, levels: list[int], seed: int = 5) -> Results:
    profile = {
        "schema_version": 1,
        "name": f"calib-{prompt}",
        "target": "sim",
        "api": "completions",
        "workload": {"prompt_tokens": prompt, "output_tokens": 96},
        "load": {"mode": "closed", "levels": levels, "duration_s": 10, "warmup_s": 2},
        "seed": seed,
    }
    return run_virtual(parse_profile(profile, "test"), sim=SimOptions(engine=LAW))[0]


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("evidence")
    paths = []
    for prompt in (128, 512):
        save_atomic(_sweep(prompt, [1, 4, 8, 16]), path := folder / f"calib-{prompt}.json")
        paths.append(path)
    return paths


def _means_table(results: Results, prompt: int, path: Path) -> Path:
    """The sweep as a vendor publishes it: per concurrency, TTFT and TPOT means and the token rate."""
    rows = ["concurrency,ttft_mean_ms,tpot_mean_ms,output_tokens_per_s,prompt_tokens,output_tokens"]
    for level in results.levels:
        ttft, tpot = level.mean_ms(Metric.TTFT), level.mean_ms(Metric.TPOT)
        rows.append(f"{level.load.value:g},{ttft:.2f},{tpot:.3f},{level.output_tokens_per_s:.2f},{prompt},96")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_means_only_mix_plan_runs_and_names_the_percentiles_it_cannot_answer(
    calibration: list[Path], tmp_path: Path
) -> None:
    imported = []
    for path, prompt in zip(calibration, (128, 512)):
        table = _means_table(load(path), prompt, tmp_path / f"{path.stem}.csv")
        out = tmp_path / f"{path.stem}-means.json"
        assert runner.invoke(app, ["import", str(table), "-o", str(out)]).exit_code == 0
        imported.append(str(out))
    args = ["plan", *imported, *MIX, "--slo", "tpot_mean<60ms", "--slo", "ttft_mean<2s", "--qps", "4", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["mix"]["length_model"]["statistic"] == "tpot_mean" and plan["max_batch"] >= 1
    assert plan["replicas"] is not None
    assert [t["percentile"] for t in plan["mix"]["ttft_residual"]] == [None]  # the mean's residual, measured
    # a percentile SLO the tables cannot answer is named, not refused with a wrong reason
    p95 = runner.invoke(app, [*args[:-1], "--slo", "tpot_p95<60ms"])
    assert p95.exit_code == 0, p95.output
    assert "tpot_p95 not in the calibration (its files give the TPOT mean only): not answered" in " ".join(
        p95.stdout.split()
    )
    # predicted levels: the means beside the engine's percentiles, no traceback for the missing p95
    levels = runner.invoke(app, [*args, "--predict-levels", "1,8"])
    assert levels.exit_code == 0, levels.output
    predicted = json.loads(levels.stdout)["predicted_levels"]
    assert all(p["ttft_mean_ms"] > 0 and p["tpot_mean_ms"] > 0 and p["tpot_p95_ms"] is None for p in predicted)
    text = " ".join(runner.invoke(app, [*args[:-1], "--predict-levels", "1,8"]).stdout.split())
    assert "TTFT mean ms" in text and "The calibration gave means only" in text
    # a table has no token events to count: no 'several tokens an event' caveat read off its request count
    single = " ".join(runner.invoke(app, ["plan", imported[0], "--slo", "tpot_mean<60ms"]).stdout.split())
    assert "tokens an event" not in single and "all 4 trusted" in single


def test_the_kv_cache_size_comes_from_the_servers_metrics(calibration: list[Path]) -> None:
    """The simulator says its cache's size as vLLM does (cache_config_info): a plan needs no flag for it."""
    levels = load(calibration[0]).levels
    assert {lv.server.kv_capacity_tokens for lv in levels if lv.server is not None} == {40_000}
    result = runner.invoke(app, ["plan", *map(str, calibration), *MIX, "--slo", "tpot_p50<60ms", "--json"])
    mix = json.loads(result.stdout)["mix"]
    assert mix["kv_capacity_tokens"] == 40_000 and mix["kv_max_batch"] == 40_000 // (1024 + 96)
    assert "as the server's /metrics said it" in mix["kv_max_batch_method"]


def test_predicted_levels_carry_intervals_that_hold_the_truth_and_read_tpot_at_the_servers_cap(
    calibration: list[Path],
) -> None:
    args = ["plan", *map(str, calibration), *MIX, "--no-simulate", "--slo", "tpot_p95<200ms", "--json"]
    result = runner.invoke(app, [*args, "--predict-levels", "1,4,8,16", "--current-batch", "8"])
    assert result.exit_code == 0, result.output
    predicted = {p["concurrency"]: p for p in json.loads(result.stdout)["predicted_levels"]}
    # past the cap of 8 the batch is 8: TPOT p95 is the one at 8, not at 16 (the queue is TTFT's)
    assert predicted[16]["tpot_p95_ms"] == pytest.approx(predicted[8]["tpot_p95_ms"])
    truth = _sweep(1024, [1, 4, 8], seed=9)
    for level in truth.levels:
        p = predicted[round(level.load.value)]
        for key, q in (("ttft_p50", 50), ("ttft_p95", 95)):
            low, high = p[f"{key}_range_ms"]
            assert low <= p[f"{key}_ms"] <= high
            measured = level.percentile_ms(Metric.TTFT, q)
            assert measured is not None
            assert low * 0.97 <= measured <= high * 1.03, (level.load.value, key, measured, low, high)
