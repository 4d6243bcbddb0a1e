"""``loadgen plan A.json B.json --prompt-tokens P --output-tokens O``: a plan for a mix no sweep measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.profile import parse_profile
from loadgen.results import Metric, SloTarget, save_atomic
from loadgen.sim.engine import EngineConfig
from loadgen.sim.openai_app import SimOptions
from planner import Mix
from planner.mixplan import max_rate_per_replica
from tests.virtual import run_virtual

runner = CliRunner()
LAW = EngineConfig(base_ms=20.0, per_seq_ms=0.3, per_kv_ms=0.8, prefill_ms_per_token=0.02, max_num_seqs=64)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two sweeps of the simulator in virtual time, at prompts of 64 and 256 tokens."""
    folder = tmp_path_factory.mktemp("calibration")
    paths = []
    for prompt in (64, 256):
        profile = parse_profile(
            {
                "schema_version": 1,
                "name": f"calib-{prompt}",
                "target": "sim",
                "api": "completions",
                "workload": {"prompt_tokens": prompt, "output_tokens": 64},
                "load": {"mode": "closed", "levels": [1, 8, 32], "duration_s": 8, "warmup_s": 2},
                "seed": 5,
            },
            "test",
        )
        results, _ = run_virtual(profile, sim=SimOptions(engine=LAW))
        path = folder / f"calib-{prompt}.json"
        save_atomic(results, path)
        paths.append(path)
    return paths


def test_the_plan_says_it_is_predicted_and_what_it_recommends(calibration: list[Path]) -> None:
    args = ["plan", *map(str, calibration), "--prompt-tokens", "1024", "--output-tokens", "128"]
    slos = ["--slo", "tpot_p50<60ms", "--slo", "ttft_p95<1s"]
    result = runner.invoke(app, [*args, *slos, "--qps", "10", "--no-simulate"])
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
        Mix(1024, 128),
        (SloTarget(Metric.TTFT, 95, 1000.0),),
    )
    assert truth is not None and mix["max_rate_rps_per_replica"] == pytest.approx(truth, rel=0.05)


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
