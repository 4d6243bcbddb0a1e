"""A server that says nothing of its KV cache's size: a calibration level that filled it says it instead.

The simulator's cache holds 20,000 tokens (34 sequences of 512 + 64) under a seat cap of 64; its gauge is
dropped from the results, as SGLang's or TGI's would be absent. The c=48 level kept 14 requests waiting
with 34 running: the plan infers 34 x 576 = 19,584 tokens, says so, and bounds the batch at the longer mix
with it, never above what the true cache holds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.inputs.profile import parse_profile
from loadgen.results import Results, save_atomic
from loadgen.sim.openai_app import SimOptions
from tests.virtual import run_virtual

LAW = EngineConfig(
    base_ms=15, per_seq_ms=0.3, per_kv_ms=0.5, prefill_ms_per_token=0.02, max_num_seqs=64, kv_capacity_tokens=20_000
)


def _calibration(prompt: int) -> Results:
    profile = {
        "schema_version": 1,
        "name": f"p{prompt}",
        "target": "sim",
        "api": "completions",
        "workload": {"prompt_tokens": prompt, "output_tokens": 64},
        "load": {"mode": "closed", "levels": [1, 8, 16, 48], "duration_s": 10, "warmup_s": 2},
        "seed": 1,
    }
    results = run_virtual(parse_profile(profile, "test"), sim=SimOptions(engine=LAW))[0]
    silent = tuple(
        dataclasses.replace(lv, server=dataclasses.replace(lv.server, kv_capacity_tokens=None))
        if lv.server is not None
        else lv
        for lv in results.levels
    )
    return dataclasses.replace(results, levels=silent)


def test_the_kv_cache_a_calibration_level_filled_bounds_the_batch_and_is_said_to_be_inferred(tmp_path: Path) -> None:
    files = []
    for prompt in (256, 512):
        save_atomic(_calibration(prompt), path := tmp_path / f"p{prompt}.json")
        files.append(str(path))
    args = ["plan", *files, "--prompt-tokens", "1024", "--output-tokens", "64", "--slo", "tpot_p95<80ms"]
    result = CliRunner().invoke(app, [*args, "--current-batch", "64", "--json"])  # the server's seat cap
    assert result.exit_code == 0, result.output
    mix = json.loads(result.stdout)["mix"]
    assert mix["kv_capacity_tokens"] == 34 * 576
    assert "inferred, not told" in mix["kv_max_batch_method"] and "c=48" in mix["kv_max_batch_method"]
    true_batch = LAW.kv_capacity_tokens // (1024 + 64)  # type: ignore[operator]
    assert mix["kv_max_batch"] <= true_batch and json.loads(result.stdout)["max_batch"] <= true_batch
