"""Baselines must measure the same workload: ``compare`` and ``gate --baseline`` refuse a mismatch."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load, save_atomic
from tests.planner.synthetic import closed_level, law_tpots, sweep_results

runner = CliRunner()


def write(path: Path, output_tokens: int, api: str = "chat") -> Path:
    levels = tuple(
        closed_level(c, law_tpots(25, 0.4, c, 300, cv=0.01, seed=c), output_tokens=output_tokens) for c in (4, 16)
    )
    settings: dict[str, object] = {
        "api": api,
        "prompt_tokens": {"mean": 64, "dist": "fixed", "spread": 0.0},
        "output_tokens": {"mean": output_tokens, "dist": "fixed", "spread": 0.0},
    }
    save_atomic(sweep_results(levels, settings), path)
    return path


@pytest.mark.parametrize("command", [["compare"], ["gate", "--baseline"]])
def test_a_baseline_of_another_workload_is_refused_naming_the_difference(tmp_path: Path, command: list[str]) -> None:
    quick, chat = write(tmp_path / "quick.json", 16), write(tmp_path / "chat.json", 200)
    args = (
        [*command, str(quick), str(chat)] if command == ["compare"] else ["gate", str(chat), "--baseline", str(quick)]
    )
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and "different workloads" in line and "output_tokens 16 fixed vs 200 fixed" in line
    assert "Traceback" not in result.output
    allowed = runner.invoke(app, [*args, "--allow-mismatch"])
    assert allowed.exit_code in (0, 1), allowed.output


def test_the_same_workload_compares(tmp_path: Path) -> None:
    a, b = write(tmp_path / "a.json", 32), write(tmp_path / "b.json", 32)
    assert runner.invoke(app, ["compare", str(a), str(b)]).exit_code == 0
    assert runner.invoke(app, ["gate", str(b), "--baseline", str(a)]).exit_code == 0


def test_runs_record_their_shape_and_convention_and_compare_refuses_to_mix_them(tmp_path: Path) -> None:
    runs = {}
    for name, extra in (("staggered", []), ("burst", ["--start", "burst"]), ("text", ["--metric-convention", "text"])):
        out = tmp_path / f"{name}.json"
        result = runner.invoke(app, ["run", "--url", "sim", "--concurrency", "2", "--requests", "4", "--max-tokens",
                                     "2", "-o", str(out), "--quiet", *extra])  # fmt: skip
        assert result.exit_code == 0, result.output
        runs[name] = out
    settings = {name: load(path).settings for name, path in runs.items()}
    assert settings["staggered"].start == "staggered" and settings["burst"].start == "burst"
    assert settings["text"].metric_convention == "text" and settings["burst"].metric_convention == "tokens"
    for other, phrase in (("burst", "start staggered vs burst"), ("text", "metric_convention tokens vs text")):
        result = runner.invoke(app, ["compare", str(runs["staggered"]), str(runs[other])])
        assert result.exit_code == 2 and phrase in result.stderr, result.output
