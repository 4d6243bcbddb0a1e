"""Real ``vllm bench serve --save-result --save-detailed`` files, made here (issue 24, item 4).

``tests/data/vllm_bench/vllm-c{1,4,16}.json``: vLLM 0.32.0's CPU build's benchmark client (the one
``tests/engines`` installs) against ``loadgen serve-sim --model tiny`` (25 + 0.4b), random dataset,
32 prompt / 16 output tokens, ``--ignore-eos``, ``--max-concurrency`` 1, 4, 16. The tokenizer was
``tests/engines/tiny_model.py``'s; nothing was downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.quantity import Metric
from loadgen.results import load
from planner import PlanRequest, plan_from_results

runner = CliRunner()
FILES = sorted((Path(__file__).parents[1] / "data" / "vllm_bench").glob("vllm-c*.json"))
VLLM_NAMES = {"ttft": Metric.TTFT, "tpot": Metric.TPOT, "itl": Metric.ITL}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm") / "imported.json"
    done = runner.invoke(app, ["import", *map(str, FILES), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "histograms from the file's 40 per-request records" in done.stderr
    return out


def test_the_files_own_figures_come_back_exactly(imported: Path) -> None:
    results = load(imported)
    for path, level in zip(sorted(FILES, key=lambda p: json.loads(p.read_text())["max_concurrency"]), results.levels):
        doc = json.loads(path.read_text())
        assert level.load.value == doc["max_concurrency"]
        for name, metric in VLLM_NAMES.items():
            assert level.mean_ms(metric) == doc[f"mean_{name}_ms"]
            assert level.percentile_ms(metric, 50) == doc[f"median_{name}_ms"]
            assert level.percentile_ms(metric, 99) == doc[f"p99_{name}_ms"]
        assert level.requests_per_s == pytest.approx(doc["request_throughput"], rel=1e-9)
        assert level.output_tokens_per_s == pytest.approx(doc["output_throughput"], rel=1e-9)


def test_other_percentiles_come_from_the_per_request_records_not_a_synthesised_shape(imported: Path) -> None:
    level = load(imported).levels[1]  # c=4
    doc = json.loads(next(p for p in FILES if p.name == "vllm-c4.json").read_text())
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    ttft = np.array([doc["ttfts"][i] for i in ok]) * 1000
    assert not level.synthesised and level.histograms[Metric.TTFT].count == len(ok)
    # the p95 vLLM did not print: HdrHistogram's answer at 3 significant digits against the records' own
    assert level.percentile_ms(Metric.TTFT, 95) == pytest.approx(np.percentile(ttft, 95, method="higher"), rel=0.01)


def test_a_plan_from_them_recovers_the_simulators_law_and_trusts_its_intervals(imported: Path) -> None:
    plan = plan_from_results(load(imported), PlanRequest())
    assert plan.fit is not None and plan.fit_statistic == "tpot_p50"
    assert plan.fit.base_ms == pytest.approx(25.0, rel=0.05) and plan.fit.per_seq_ms == pytest.approx(0.4, rel=0.25)
    assert not any("percentile intervals unknown" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"p99_tpot_ms": float("nan")}, "tpot_p99: expected a latency between 0 and 3,600,000 ms, got nan"),
        ({"mean_ttft_ms": float("inf")}, "ttft_mean: expected a latency between 0 and 3,600,000 ms, got inf"),
        ({"median_itl_ms": -3.0}, "itl_p50: expected a latency"),
        ({"median_e2el_ms": 1e308}, "e2e_p50: expected a latency"),
        ({"max_concurrency": float("inf")}, "the load (concurrency) must be a finite number in (0, 100,000]"),
        # an answer's length of inf (or past int64) raised OverflowError through the import (the fuzz test)
        ({"output_lens": [float("inf")] * 40}, "output_lens, itls): expected finite numbers"),
        ({"output_lens": [10**30] * 40}, "output_lens, itls): expected finite numbers"),
    ],
)
def test_a_non_finite_or_negative_figure_is_refused_by_name(tmp_path: Path, change: dict, message: str) -> None:  # type: ignore[type-arg]
    """Issue 31, item 4: NaN/inf/negative/1e308 latencies were imported silently, and an infinite
    max_concurrency was written into a results file that plan, report and gate could not read."""
    doc = {**json.loads(FILES[0].read_text()), **change}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))  # Python writes NaN and Infinity, as vLLM's json.dump does
    done = runner.invoke(app, ["import", str(bad), "-o", str(tmp_path / "x.json")])
    assert done.exit_code == 2 and message in " ".join(done.output.split()), done.output
    assert not (tmp_path / "x.json").exists()


def test_planning_a_bench_file_itself_points_to_import() -> None:
    """Issue 73: `plan` on vLLM's own result file said only "not a loadgen results file"."""
    done = runner.invoke(app, ["plan", str(FILES[0]), "--slo", "tpot_p95<40ms"])
    said = " ".join(done.stderr.split())
    assert done.exit_code == 3 and "not a loadgen results file" in said
    assert "`loadgen import FILE... -o results.json`" in said
