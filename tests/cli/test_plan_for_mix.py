"""``loadgen plan A.json B.json --prompt-tokens P --output-tokens O``: a plan for a mix no sweep measured."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.level.aggregates import mean_prompt_tokens
from loadgen.quantity import Metric
from loadgen.results import Results, load, save_atomic
from loadgen.sim.openai_app import SimOptions
from loadgen.slo_target import SloTarget
from planner.capacity.sizing import Traffic, max_rate_per_replica
from planner.laws.lengthmodel import Mix
from planner.laws.lengthsample import LengthSample
from tests.virtual import run_virtual

runner = CliRunner()
LAW = EngineConfig(base_ms=20.0, per_seq_ms=0.3, per_kv_ms=0.8, prefill_ms_per_token=0.02, max_num_seqs=64)
E2E_P95_S = 8.0  # an E2E p95 SLO that the longest answers of a spread mix decide


def _calibrate(folder: Path, output: object, engine: EngineConfig = LAW) -> list[Path]:
    """Two sweeps of the simulator in virtual time, at prompts of 64 and 256 tokens, outputs ``output``."""
    paths = []
    for prompt in (64, 256):
        profile = parse_profile(
            {
                "schema_version": 1,
                "name": f"calib-{prompt}",
                "target": "sim",
                "api": "completions",
                "workload": {"prompt_tokens": prompt, "output_tokens": output},
                "load": {"mode": "closed", "levels": [1, 8, 32], "duration_s": 8, "warmup_s": 2},
                "seed": 5,
            },
            "test",
        )
        results, _ = run_virtual(profile, sim=SimOptions(engine=engine))
        path = folder / f"calib-{prompt}.json"
        save_atomic(results, path)
        paths.append(path)
    return paths


def _truth(output: object, levels: list[int], duration_s: float, engine: EngineConfig) -> Results:
    """The sweep a prediction stands for, run on the true law: prompts of 1,024 tokens, outputs ``output``."""
    profile = {
        "schema_version": 1,
        "name": "truth",
        "target": "sim",
        "api": "completions",
        "workload": {"prompt_tokens": 1024, "output_tokens": output},
        "load": {"mode": "closed", "levels": levels, "duration_s": duration_s, "warmup_s": duration_s / 4},
        "seed": 9,
    }
    return run_virtual(parse_profile(profile, "test"), sim=SimOptions(engine=engine))[0]


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two sweeps of the simulator in virtual time, at prompts of 64 and 256 tokens, fixed lengths."""
    return _calibrate(tmp_path_factory.mktemp("calibration"), 64)


def test_the_plan_says_it_is_predicted_and_what_it_recommends(calibration: list[Path]) -> None:
    args = ["plan", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128"]
    slos = ["--slo", "tpot_p50<60ms", "--slo", "ttft_p95<1s"]
    result = runner.invoke(app, [*args, *slos, "--qps", "10", "--no-simulate", "--explain"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    for expected in (
        "PREDICTED for prompt 1024 / output 128 tokens, a mix not measured",
        "prompt tokens 1024 outside the calibrated 64..256",
        "largest request rate one replica holds: none (not simulated",
        "--max-num-batched-tokens",
        "[predicted]",
    ):
        assert expected in text
    as_json = json.loads(runner.invoke(app, [*args, *slos, "--json"]).stdout)
    mix = as_json["mix"]
    assert mix["label"] == "predicted for a mix not measured"
    coefficients = mix["length_model"]["coefficients"]
    assert coefficients["per_kv_ms"]["value"] == pytest.approx(0.8, rel=0.05)
    assert coefficients["prefill_ms_per_token"]["value"] == pytest.approx(0.02, rel=0.05)
    # the largest rate one replica holds under TTFT p95 < 1 s: within 5% of what the true law gives
    truth, _ = max_rate_per_replica(
        _at(as_json["max_batch"]),
        (SloTarget(metric=Metric.TTFT, percentile=95, limit=1000.0),),
        Traffic(output_tokens=128, prompt_tokens=1024),
    )
    assert truth is not None and mix["max_rate_rps_per_replica"] == pytest.approx(truth, rel=0.05)
    # the simulator's engine is the fitted one: its calibration leaves next to nothing beyond it
    assert [t["percentile"] for t in mix["ttft_residual"]] == [50.0, 95.0, None]
    assert all(t["levels"] == 6 and abs(t["at_one_client_ms"]) < 0.5 for t in mix["ttft_residual"])


def _at(batch: int) -> EngineConfig:
    return EngineConfig(
        base_ms=LAW.base_ms,
        per_seq_ms=LAW.per_seq_ms,
        per_kv_ms=LAW.per_kv_ms,
        prefill_ms_per_token=LAW.prefill_ms_per_token,
        max_num_seqs=batch,
    )


def test_several_files_without_the_mix_is_a_one_line_error(calibration: list[Path]) -> None:
    result = runner.invoke(app, ["plan", *map(str, calibration), "--output-tokens", "128"])
    assert result.exit_code == 2
    assert "give --prompt-tokens and --output-tokens" in result.output
    assert "Traceback" not in result.output


def test_the_report_shows_the_surface_measured_beside_the_model_and_the_mix_predicted(
    calibration: list[Path], tmp_path: Path
) -> None:
    args = ["report", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128"]
    md = tmp_path / "mix.md"
    result = runner.invoke(app, [*args, "--slo", "tpot_p50<60ms", "--predict-levels", "1,8", "-o", str(md)])
    assert result.exit_code == 0, result.output
    text = md.read_text()
    assert text.startswith("# Capacity plan for a mix not measured")
    assert "**PREDICTED for prompt 1024 / output 128 tokens (a mix not measured): max batch" in text
    for name in ("calib-64.json", "calib-256.json"):
        assert f"## Levels: {name}" in text
    table = text.split("## Step model with lengths")[1].split("## ")[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and not line.startswith("| row")]
    measured = [r for r in rows if not r[0].startswith("| asked")]
    asked = [r for r in rows if r[0].startswith("| asked")]
    # every calibration row: the model within 3% of what was measured (the simulator's law is the model's)
    assert len(measured) == 8  # 2 sweeps x (3 TPOT levels + TTFT at c=1)
    assert all(abs(float(r[-1].rstrip("% |"))) < 3 for r in measured)
    # the asked mix, at batch 1, the batch acted on and the largest calibrated, and its TTFT at c=1
    assert {r[2] for r in asked} == {"1,024"} and len(asked) >= 3
    assert all(r[5] == "-" and "(" in r[6] for r in asked)
    rest = text.split("## TTFT beyond the fitted engine")[1].split("## ")[0]
    assert "| calib-64.json c=8 |" in rest and "TTFT p95 adds" in rest  # each level beside the engine run at it
    predicted = text.split("## PREDICTED levels for prompt 1024 / output 128 tokens")[1].split("## ")[0]
    assert "| c=1 |" in predicted and "| c=8 |" in predicted  # the sweep not run, beside the plan
    html = tmp_path / "mix.html"
    result = runner.invoke(app, [*args, "--slo", "tpot_p50<60ms", "-o", str(html)])
    assert result.exit_code == 0, result.output
    page = html.read_text()
    assert page.count("<img") == 1 and 'data-slo-tpot_p50_ms="60' in page and "data-max-batch=" in page


def test_a_report_of_several_files_needs_the_mix(calibration: list[Path], tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", *map(str, calibration), "--output-tokens", "128"])
    assert result.exit_code == 2 and "give --prompt-tokens and --output-tokens" in result.output
    result = runner.invoke(app, ["report", *map(str, calibration), "-o", str(tmp_path / "r.csv")])
    assert result.exit_code == 2 and "give one RESULTS" in result.output
    result = runner.invoke(app, ["report", str(calibration[0]), "--predict-levels", "1,8"])
    assert result.exit_code == 2 and "for a mix plan: give two or more RESULTS" in result.output


def test_a_dataset_of_one_length_plans_as_that_length_and_says_where_its_lengths_came_from(
    calibration: list[Path], tmp_path: Path
) -> None:
    dataset = tmp_path / "lengths.jsonl"
    dataset.write_text(
        "".join(json.dumps({"prompt": " ".join(["w"] * 1024), "max_tokens": 128}) + "\n" for _ in range(20))
    )
    slos = ["--slo", "tpot_p50<60ms", "--slo", "ttft_p95<1s", "--json", "--no-simulate"]
    by_means = json.loads(
        runner.invoke(
            app, ["plan", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128", *slos]
        ).stdout
    )
    result = runner.invoke(
        app, ["plan", *map(str, calibration), "--dataset", str(dataset), "--tokens-per-word", "1", *slos]
    )
    assert result.exit_code == 0, result.output
    by_dataset = json.loads(result.stdout)
    assert by_dataset["mix"]["predicted_for"]["prompt_tokens"] == pytest.approx(1024)
    assert by_dataset["max_batch"] == by_means["max_batch"]
    # the simulation's draws from the sample are checked against fixed lengths in tests/planner/test_length_sample.py
    assert any(
        "lengths from lengths.jsonl (20 entries; words x 1 tokens/word, --tokens-per-word)" in w
        for w in by_dataset["warnings"]
    )
    no_answer = tmp_path / "prompts.jsonl"
    no_answer.write_text(json.dumps({"prompt": "a b c"}) + "\n")
    result = runner.invoke(app, ["plan", *map(str, calibration), "--dataset", str(no_answer), "--tokens-per-word", "1"])
    assert result.exit_code == 2 and "no max_tokens and no recorded answer; give --output-tokens" in result.output


def test_predicted_levels_match_the_simulator_run_at_the_mix(calibration: list[Path]) -> None:
    """The sweep not run, predicted from the calibration, against that sweep run on the true law."""
    args = ["plan", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128", "--no-simulate"]
    result = runner.invoke(app, [*args, "--predict-levels", "1,8", "--current-batch", "64", "--json"])
    assert result.exit_code == 0, result.output
    predicted = {p["concurrency"]: p for p in json.loads(result.stdout)["predicted_levels"]}
    truth = _truth(128, [1, 8], 20, LAW)
    for level in truth.levels:
        c = round(level.load.value)
        for key, metric in (("ttft_p50_ms", Metric.TTFT), ("tpot_p50_ms", Metric.TPOT)):
            assert predicted[c][key] == pytest.approx(level.percentile_ms(metric, 50), rel=0.05), (c, key)
    assert json.loads(result.stdout)["predicted_lengths"] == "fixed, prompt 1024 / output 128"
    text = runner.invoke(app, [*args, "--predict-levels", "1"]).stdout
    assert "PREDICTED levels for prompt 1024 / output 128 tokens" in " ".join(text.split())
    bad = runner.invoke(app, [*args, "--predict-levels", "0,8"])
    assert bad.exit_code == 2 and "--predict-levels '0,8': expected concurrencies from 1" in bad.output


def test_the_calibration_servers_token_budget_is_for_a_mix_plan_and_chunks_its_prefill(
    calibration: list[Path],
) -> None:
    one = runner.invoke(app, ["plan", str(calibration[0]), "--max-num-batched-tokens", "2048"])
    assert one.exit_code == 2 and "for a mix plan: give two or more RESULTS" in one.output
    args = ["plan", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128", "--no-simulate"]
    result = runner.invoke(app, [*args, "--max-num-batched-tokens", "128", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["mix"]["length_model"]["token_budget"] == 128
    low = runner.invoke(
        app, [*args, "--max-num-batched-tokens", "16", "--predict-levels", "8", "--current-batch", "32"]
    )
    assert low.exit_code == 2 and "below the batch cap 32" in low.output


def test_the_calibration_profile_sweeps_at_the_prompt_length_asked(tmp_path: Path) -> None:
    out = tmp_path / "calib-256.json"
    args = ["sweep", "--profile", "calibration", "--levels", "1,8", "--virtual-time", "--quiet"]
    result = runner.invoke(app, [*args, "--prompt-tokens", "256", "-o", str(out)])
    assert result.exit_code == 0, result.output
    results = load(out)
    assert [lv.load.value for lv in results.levels] == [1, 8]
    assert mean_prompt_tokens(results.levels) == pytest.approx(256, rel=0.02)
    bad = runner.invoke(app, [*args, "--prompt-tokens", "0", "-o", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "--prompt-tokens" in bad.output


def test_the_kv_cache_caps_the_batch_and_the_plan_says_so(calibration: list[Path]) -> None:
    """1,152 tokens a sequence (prompt 1,024, answer 128) in a 20,000-token cache: 17 run whole, though the
    TPOT SLO alone allows ~30; without the cache's size the plan says the batch was not checked against it."""
    args = ["plan", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128"]
    args += ["--slo", "tpot_p50<60ms", "--json"]
    free = json.loads(runner.invoke(app, args).stdout)
    assert free["max_batch"] > 17 and free["mix"]["kv_capacity_tokens"] is None
    assert any("KV cache's size is not known" in w for w in free["warnings"])
    capped = json.loads(runner.invoke(app, [*args, "--kv-capacity-tokens", "20000"]).stdout)
    assert capped["max_batch"] == 17 == capped["mix"]["kv_max_batch"]
    assert "holds 17 sequences of 1,152 tokens" in capped["mix"]["kv_max_batch_method"]
    assert any("the SLOs alone would allow more" in w for w in capped["warnings"])
    text = " ".join(runner.invoke(app, [*args[:-1], "--kv-capacity-tokens", "20000"]).stdout.split())
    assert "set --max-num-seqs 17 the KV cache holds no more (" in text  # the decision names what bounds it
    text = " ".join(runner.invoke(app, [*args[:-1], "--kv-capacity-tokens", "20000", "--explain"]).stdout.split())
    assert "KV cache: at most batch 17" in text
    # the sweep not run holds the cache too: at c=32, 15 of 32 requests wait for room (17 run at once)
    predict = [*args, "--predict-levels", "32", "--current-batch", "64"]
    free_ttft, capped_ttft = (
        json.loads(runner.invoke(app, predict + kv).stdout)["predicted_levels"][0]["ttft_p50_ms"]
        for kv in ([], ["--kv-capacity-tokens", "20000"])
    )
    assert capped_ttft > 10 * free_ttft  # a wait of whole request lifetimes, not of a step
    one = runner.invoke(app, ["plan", str(calibration[0]), "--kv-capacity-tokens", "20000"])
    assert one.exit_code == 2 and "--kv-capacity-tokens: for a mix plan" in one.stderr


def test_a_simulated_calibrations_kv_cache_is_read_from_its_files(calibration: list[Path], tmp_path: Path) -> None:
    """The simulator's profile holds its cache's size (a real server's results do not): no flag needed."""
    files = []
    for path in calibration:
        doc = json.loads(path.read_text())
        doc["settings"]["profile"]["sim"]["kv_capacity_tokens"] = 20000
        (copy := tmp_path / path.name).write_text(json.dumps(doc))
        files.append(str(copy))
    args = ["plan", *files, "--prompt-tokens", "1024", "--output-tokens", "128", "--slo", "tpot_p50<60ms", "--json"]
    assert json.loads(runner.invoke(app, args).stdout)["mix"]["kv_max_batch"] == 17


def test_predicted_levels_draw_lengths_as_the_calibration_asked(tmp_path: Path) -> None:
    """Outputs uniform within 25% in every calibration sweep: the sweep not run draws its outputs so too,
    and its TTFT p95 at c=8 (prefills of 1,024 tokens colliding in a budget of 2,048) is the one a sweep
    with that spread reads, where fixed lengths would predict about its p50."""
    law = dataclasses.replace(LAW, max_num_batched_tokens=2048)
    spread = {"mean": 64, "dist": "uniform", "spread": 0.25}
    calibration = _calibrate(tmp_path, spread, law)
    args = ["plan", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128", "--no-simulate"]
    budget = ["--max-num-batched-tokens", "2048", "--current-batch", "64", "--json"]
    result = runner.invoke(app, [*args, "--predict-levels", "8", *budget])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (
        doc["predicted_lengths"] == "the calibration's shape at these means (prompt fixed, output uniform spread 0.25)"
    )
    truth = _truth({**spread, "mean": 128}, [8], 60, law)
    predicted = doc["predicted_levels"][0]
    assert predicted["ttft_p95_ms"] == pytest.approx(truth.levels[0].percentile_ms(Metric.TTFT, 95), rel=0.1)
    assert predicted["ttft_p50_ms"] == pytest.approx(truth.levels[0].percentile_ms(Metric.TTFT, 50), rel=0.05)


def test_a_mix_plans_sizing_draws_the_lengths_in_the_calibrations_shape(tmp_path: Path) -> None:
    """Outputs uniform within 90% in every calibration sweep: the sizing simulation draws them so at the
    asked means, as a predicted level does, and the largest rate one replica holds under an E2E p95 SLO is
    the one the true law holds with such outputs: the longest answers set an E2E p95. Drawing fixed lengths
    at the mean, the plan read 3.19 requests/s where the true law holds 2.07."""
    spread = {"mean": 64, "dist": "uniform", "spread": 0.9}
    calibration = _calibrate(tmp_path, spread)
    slos = ["--slo", "tpot_p50<60ms", "--slo", f"e2e_p95<{E2E_P95_S}s"]
    args = ["plan", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128", *slos, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    shape = "the calibration's shape at these means (prompt fixed, output uniform spread 0.9)"
    assert f"lengths drawn from {shape}" in doc["mix"]["max_rate_method"]
    e2e, batch = (SloTarget(metric=Metric.E2E, percentile=95, limit=E2E_P95_S * 1000),), doc["max_batch"]
    lengths = LengthSample.shaped(Mix(1024, 128), None, spread)
    drawn, _ = max_rate_per_replica(_at(batch), e2e, Traffic(output_tokens=128, prompt_tokens=1024, lengths=lengths))
    fixed, _ = max_rate_per_replica(_at(batch), e2e, Traffic(output_tokens=128, prompt_tokens=1024))
    assert drawn is not None and fixed is not None and drawn < 0.9 * fixed
    assert doc["mix"]["max_rate_rps_per_replica"] == pytest.approx(drawn, rel=0.1)
    # and the batch limits read the length model at that shape's context per sequence-step (1,104 tokens, not
    # the means' 1,087.5): a long answer holds its growing context for more steps
    assert doc["mix"]["predicted_for"]["context_tokens"] == pytest.approx(lengths.mix.context, rel=0.01)
    assert doc["mix"]["predicted_for"]["context_tokens"] > 1100
