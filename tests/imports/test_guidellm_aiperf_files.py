"""Real GuideLLM and AIPerf result files, made here against the simulator (issue 24: readers tested on real files).

Each tool ran at concurrency 1, 4 and 16 against ``loadgen serve-sim`` (25 + 0.4b per step), 32 prompt
/ 16 output tokens, with ``tests/engines/tiny_model.py``'s tokenizer (nothing downloaded):
``tests/data/guidellm/``: GuideLLM 0.8.1, ``guidellm run --scenario scenario.json`` (5 s a level;
the 1 MB ``benchmarks.json`` kept gzipped, byte for byte); ``tests/data/aiperf/``: AIPerf 0.13.0,
``aiperf profile --endpoint-type completions --streaming --concurrency C --request-count 40|160
--isl 32 --osl 16 --extra-inputs ignore_eos:true``. AIPerf counts tokens with its own tokenizer
(20 per answer where the server's usage says 16), so its TPOT is the server's step x 15/19: the
importer carries the file's figures as they are.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.quantity import Metric
from loadgen.results import load
from planner import PlanRequest, plan_from_results

runner = CliRunner()
DATA = Path(__file__).parents[1] / "data"
AIPERF = sorted((DATA / "aiperf").glob("profile_export_aiperf-c*.json"), key=lambda p: int(p.stem.split("-c")[1]))


def _import(tmp_path: Path, *files: Path) -> Path:
    out = tmp_path / "imported.json"
    done = runner.invoke(app, ["import", *map(str, files), "-o", str(out)])
    assert done.exit_code == 0, done.output
    return out


def test_guidellm_benchmarks_import_with_their_own_figures(tmp_path: Path) -> None:
    raw = tmp_path / "benchmarks.json"
    raw.write_bytes(gzip.decompress((DATA / "guidellm" / "benchmarks-c1-4-16.json.gz").read_bytes()))
    results = load(_import(tmp_path, raw))
    doc = json.loads(raw.read_text())
    assert (results.settings.imported or {})["format"] == "guidellm"
    assert [lv.load.value for lv in results.levels] == [1, 4, 16]
    for level, bench in zip(results.levels, doc["benchmarks"]):
        tpot = bench["metrics"]["time_per_output_token_ms"]["successful"]
        assert level.mean_ms(Metric.TPOT) == tpot["mean"] and level.percentile_ms(Metric.TPOT, 50) == tpot["median"]
        assert level.requests_per_s == pytest.approx(bench["metrics"]["requests_per_second"]["successful"]["mean"])
    plan = plan_from_results(results, PlanRequest())
    assert plan.fit is not None and plan.fit.base_ms == pytest.approx(25.0, rel=0.05) and plan.fit.per_seq_ms > 0


def test_aiperf_profile_exports_import_with_the_load_of_their_profiling_phase(tmp_path: Path) -> None:
    results = load(_import(tmp_path, *AIPERF))
    assert (results.settings.imported or {})["format"] == "aiperf"
    assert [lv.load.value for lv in results.levels] == [1, 4, 16]
    for level, path in zip(results.levels, AIPERF):
        doc = json.loads(path.read_text())
        itl, ttft = doc["inter_token_latency"], doc["time_to_first_token"]
        assert level.percentile_ms(Metric.TPOT, 95) == itl["p95"] and level.mean_ms(Metric.TPOT) == itl["avg"]
        assert level.percentile_ms(Metric.TTFT, 99) == ttft["p99"]
        assert level.requests_per_s == pytest.approx(doc["request_throughput"]["avg"])
        assert level.percentile_ms(Metric.TPOT, 99.9) is None  # AIPerf does not print it: absent, not invented
    plan = plan_from_results(results, PlanRequest())
    assert plan.fit is not None and plan.fit.per_seq_ms > 0


@pytest.mark.parametrize("count", [float("inf"), -40.0])
def test_an_aiperf_request_count_that_is_no_count_is_refused_by_name(tmp_path: Path, count: float) -> None:
    """int(inf) raised OverflowError through the import (a traceback); a negative count was kept."""
    doc = json.loads(AIPERF[0].read_text())
    doc["request_count"] = {"unit": "requests", "avg": count}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))  # Python writes Infinity, as a JSON writer in Python does
    done = runner.invoke(app, ["import", str(bad), "-o", str(tmp_path / "x.json")])
    assert done.exit_code == 2, done.output
    assert "request_count: expected a finite number >= 0" in " ".join(done.output.split())
    assert not (tmp_path / "x.json").exists()
