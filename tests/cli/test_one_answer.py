"""One question, one answer: ``sweep``'s headline, ``plan`` and ``report`` size the same sweep alike, under the
one precedence rule (defaults < the stored profile < ``--profile`` < flags)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.inputs.plan_layers import DEFAULTS, PlanLayer, resolve

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
runner = CliRunner()


@pytest.fixture(scope="module")
def quickstart_at_60(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The quickstart profile planning at utilization 0.6 with seed 3, swept in virtual time."""
    folder = tmp_path_factory.mktemp("one-answer")
    text = (PROFILES / "quickstart.yaml").read_text()
    text = text.replace("  output_tokens: 200\n", "  output_tokens: 200\n  max_utilization: 0.6\n")
    text = text.replace("\nseed: 1\n", "\nseed: 3\n")
    assert "max_utilization: 0.6" in text and "seed: 3" in text
    profile = folder / "qs.yaml"
    profile.write_text(text)
    sweep = folder / "sweep.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "-o", str(sweep)])
    assert result.exit_code == 0, result.output
    return sweep, result.output


def _answer(text: str) -> tuple[str, str, str]:
    """(max batch, recommended replicas, simulated TTFT p95 of the passing count) as the decision states them."""
    flat = " ".join(text.split())
    batch = re.search(r"set --max-num-seqs (\d+)", flat)
    replicas = re.search(r"run (\d+) replicas", flat)
    ttft = re.search(r"passes from \d+: ttft_p95 ([\d,]+) ms", flat)
    assert batch and replicas and ttft, flat
    return batch.group(1), replicas.group(1), ttft.group(1)


def test_sweep_plan_and_report_give_one_answer(quickstart_at_60: tuple[Path, str]) -> None:
    sweep, swept = quickstart_at_60
    planned = runner.invoke(app, ["plan", str(sweep)])
    reported = runner.invoke(app, ["report", str(sweep)])
    assert planned.exit_code == 0 and reported.exit_code == 0, (planned.output, reported.output)
    answers = {_answer(swept), _answer(planned.output), _answer(reported.output)}
    assert len(answers) == 1, answers
    assert "each replica at most 60% busy" in " ".join(planned.output.split())


def test_a_flag_overrides_the_stored_profile_for_every_command(quickstart_at_60: tuple[Path, str]) -> None:
    sweep, _ = quickstart_at_60
    planned = runner.invoke(app, ["plan", str(sweep), "--max-utilization", "0.8", "--json"])
    assert planned.exit_code == 0, planned.output
    doc = json.loads(planned.stdout)
    reported = runner.invoke(app, ["report", str(sweep), "--max-utilization", "0.8"])
    assert reported.exit_code == 0, reported.output
    assert f"recommended: {doc['replicas']} replicas" in " ".join(reported.output.split())
    stored = runner.invoke(app, ["plan", str(sweep), "--json"])
    assert json.loads(stored.stdout)["replicas"] > doc["replicas"]  # 0.6 needs more


def test_each_layer_holds_where_the_one_above_says_nothing() -> None:
    stored = PlanLayer(qps=40.0, max_utilization=0.6, seed=3)
    profile = PlanLayer(qps=10.0)
    flags = PlanLayer(seed=7)
    got = resolve(DEFAULTS, stored, profile, flags)
    assert (got.qps, got.max_utilization, got.seed, got.output_tokens) == (10.0, 0.6, 7, None)
    assert resolve(DEFAULTS).max_utilization == 0.8 and resolve(DEFAULTS).seed == 0
