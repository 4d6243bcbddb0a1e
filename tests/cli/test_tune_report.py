"""``loadgen report tune.json``: a tune search's trials, predicted against measured, their front and their cost.

Issue 72 item 4: the record and each trial's results file (here swept in virtual time, as a trial's levels
are) read back as one report; the cost per million output tokens is the price over what the trial's cap
level served."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load

runner = CliRunner()


def sweep(path: Path, levels: str) -> None:
    args = ["sweep", "--profile", "quickstart", "--virtual-time", "--levels", levels, "--duration", "5"]
    result = runner.invoke(app, [*args, "--no-stop", "-o", str(path), "--quiet"])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A search of two trials: the calibration, and a cap of 37 that held (the quickstart's law crosses 40 ms
    there), each trial's levels a results file beside the record."""
    folder = tmp_path_factory.mktemp("tune")
    sweep(folder / "tune-trial-1.json", "8,16,32")
    sweep(folder / "tune-trial-2.json", "37,41")
    trial = {"why": "", "server": "ready", "start_s": 1.0, "log": None, "log_tail": []}
    doc = {
        "kind": "loadgen-tune", "version": 1, "serve_cmd": "loadgen serve-sim --max-num-seqs {max_num_seqs}",
        "slos": {"tpot_p95_ms": 40.0}, "stopped": "37 holds", "restarts": 1, "wall_s": 30.0,
        "verified": {"max_num_seqs": 37}, "replicas": None, "replicas_why": "", "unverified": "",
        "trials": [
            {**trial, "number": 1, "config": {"max_num_seqs": 128}, "verdict": "calibration", "holds": None,
             "predicted_ms": {}, "measured": {}, "results": str(folder / "tune-trial-1.json")},
            {**trial, "number": 2, "config": {"max_num_seqs": 37}, "verdict": "holds", "holds": True,
             "predicted_ms": {"tpot_p95_ms": 39.8}, "measured": {"tpot_p95_ms": 39.9},
             "results": str(folder / "tune-trial-2.json")},
        ],
    }  # fmt: skip
    (folder / "tune.json").write_text(json.dumps(doc))
    return folder / "tune.json"


def test_the_report_of_a_tune_record_prices_each_trial_at_its_cap(record: Path, tmp_path: Path) -> None:
    out = tmp_path / "tune.md"
    result = runner.invoke(app, ["report", str(record), "--price", "2.5", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "**Set --max-num-seqs 37: verified as measured; 1 restart(s), 30 s.**" in text
    cap = load(record.with_name("tune-trial-2.json")).levels[0]
    assert cap.output_tokens_per_s is not None
    usd = 2.5 / (cap.output_tokens_per_s * 3600) * 1e6
    assert f"| 39.8 / 39.9 | {cap.output_tokens_per_s:,.0f} | ${usd:,.2f} |" in text
    # the front: every level, the verified trial's own marked, the SLO's per-user rate said
    assert text.count("| trial 1 c=") == 3 and text.count("| VERIFIED |") == 1 and "at least 25.0 tok/s" in text


def test_a_record_moved_with_its_trials_reads_them_beside_it(record: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(record.parent, moved)
    shutil.rmtree(record.parent)  # the paths the record holds no longer exist
    try:
        result = runner.invoke(app, ["report", str(moved / "tune.json"), "--json"])
        assert result.exit_code == 0, result.output
        front = json.loads(result.stdout)["sections"][1]["table"]
        assert len(front) == 5  # three calibration levels and the trial's two
    finally:
        shutil.copytree(moved, record.parent)


def test_the_html_report_draws_the_front_with_the_slo_line(record: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "tune.html"
    assert runner.invoke(app, ["report", str(record), "-o", str(out)]).exit_code == 0
    html = out.read_text()
    assert 'id="tune_front"' in html and 'data-slo-per-user="25' in html and "data:image/png;base64," in html


def test_a_price_for_anything_but_a_tune_record_is_one_line(record: Path) -> None:
    result = runner.invoke(app, ["report", str(record.with_name("tune-trial-2.json")), "--price", "2"])
    assert result.exit_code == 2 and "--price prices the trials of a `loadgen tune` record" in result.stderr
    assert runner.invoke(app, ["report", str(record), "--price", "-1"]).exit_code == 2
