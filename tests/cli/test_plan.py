"""``loadgen plan``: docs/design.md's what-if, JSON keys, a fixture sweep, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"
runner = CliRunner()


def test_what_if_prints_the_chapters_whole_example() -> None:
    result = runner.invoke(
        app,
        [
            "plan",
            "--law",
            "25+0.4b",
            "--slo",
            "tpot_p95<60ms",
            "--qps",
            "40",
            "--output-tokens",
            "200",
            "--current-batch",
            "128",
            "--lengths",
            "3,3,3,10",
            "--explain",
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    for expected in (
        "max batch 87",
        "step 59.8 ms",
        "1,454.8 tok/s per replica",
        "6 with no headroom",
        "7 at utilization <= 0.8",
        "76.2 ms",
        "--max-num-seqs 87",
        "19 useful of 40 slot-steps (47.5%)",
    ):
        assert expected in text, expected


CHAPTER_WITH_TTFT = ["plan", "--law", "25+0.4b", "--slo", "tpot_p95<60ms", "--slo", "ttft_p95<1s", "--qps", "40",
                     "--output-tokens", "200"]  # fmt: skip


def test_plan_json_has_the_stable_keys() -> None:
    result = runner.invoke(app, [*CHAPTER_WITH_TTFT, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["max_batch"] == 87 and doc["replicas_no_headroom"] == 6
    assert round(doc["step_ms_at_max_batch"], 1) == 59.8 and round(doc["tokens_per_s_per_replica"], 1) == 1454.8
    assert doc["fit"]["base_ms"] == 25.0 and doc["fit"]["per_seq_ms"] == 0.4
    assert doc["replicas"] == 7 and doc["simulated"]["replicas"] == 7 and "simulation" in doc["replicas_method"]
    for key in ("slo", "sizing", "diagnosis", "warnings", "saturation", "observations", "max_batch_method"):
        assert key in doc
    assert doc["slo"][0]["law"]["base_ms"] == 25.0


def test_the_chapters_what_if_with_a_ttft_slo_needs_7_and_shows_6_failing_deterministically() -> None:
    args = [*CHAPTER_WITH_TTFT, "--seed", "3", "--explain"]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    text = " ".join(first.stdout.split())
    assert "recommended: 7 replicas" in text
    failing = re.search(r"6 fail \(utilization 0\.92, \d+ replications: ttft_p95 [\d,]+ ms \(95% CI ([\d,]+)\.\.", text)
    assert failing is not None, text
    assert int(failing.group(1).replace(",", "")) > 1000


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--law", "25+0b", "--slo", "tpot_p95<40ms"],
            ["max batch any [any batch]", "any batch meets this SLO; the batch is bounded by the server's cap"],
        ),
        (
            ["--law", "25+0b", "--slo", "tpot_p95<40ms", "--current-batch", "64"],
            ["max batch 64 (model 64) [any batch]", "bounded by --current-batch 64"],
        ),
        (  # the server's cap in use does not hide the SLO's answer (issue 24, item 8)
            ["--law", "25+0.4b", "--slo", "tpot_p95<100ms", "--current-batch", "128"],
            [
                "tpot_p95_ms <= 100: max batch 187 (model 187) [model only]",
                "batch headroom: the SLO allows batch 187, above the cap of 128 in use",
                "Raising --max-num-seqs to 187 gives 1,873.7 tok/s per replica instead of 1,679.8 (+12%)",
            ],
        ),
        (
            ["--law", "25+0.4b", "--slo", "tpot_p95<60ms", "--qps", "1", "--output-tokens", "200"],
            ["recommended: 1 replica (utilization"],
        ),
        (
            ["--law", "25+0.4b", "--slo", "tpot_p95<25ms", "--current-batch", "64"],
            [
                "[below the floor]",
                "even batch 1 takes 25.4 ms per step",
                "faster hardware",
                "Neither a smaller batch nor more replicas",
            ],
        ),
        (
            ["--law", "25+0.4b", "--slo", "ttft_p95<1s", "--qps", "40", "--output-tokens", "200"],
            ["no TPOT SLO bounds the batch", "give --current-batch"],
        ),
        (
            [
                "--law",
                "25+0.4b",
                "--slo",
                "ttft_p95<1s",
                "--qps",
                "40",
                "--output-tokens",
                "200",
                "--current-batch",
                "87",
            ],
            ["at batch 87 (--current-batch", "recommended: 7 replicas"],
        ),
        (["--law", "25+0.4b"], ["nothing to plan from the law alone"]),
        (
            [
                "--law",
                "20+0.125b",
                "--slo",
                "tpot_p95<25ms",
                "--qps",
                "46.4",
                "--output-tokens",
                "200",
                "--max-utilization",
                "0.58",
            ],
            ["10 at utilization <= 0.58", "recommended: 10 replicas"],
        ),
    ],
)
def test_what_if_corner_cases(args: list[str], expected: list[str]) -> None:
    result = runner.invoke(app, ["plan", *args, "--explain"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    for phrase in expected:
        assert phrase in text, (phrase, text)
    assert "shrink the batch" not in text.lower()
    assert "measured" not in text and "sweep more levels" not in text  # what-if: nothing was measured or fitted


def test_plan_from_a_recorded_sweep() -> None:
    result = runner.invoke(app, ["plan", str(DATA / "results_v1_sweep.json"), "--slo", "tpot_p95<100ms", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["batch_axis"] == "server"
    assert 14 <= doc["saturation"]["max_batch"] <= 16
    assert [lv["state"] for lv in doc["saturation"]["levels"]][-2:] == ["saturated", "saturated"]
    assert doc["slo"][0]["quality"] == "capped at max batch"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--law", "25 plus 0.4"], "--law"),
        (["--law", "25+0.4b", "--slo", "tpot<50"], "--slo"),
        (["--law", "25+0.4b", "--slo", "tpot_p95<50ms", "--qps", "40"], "--output-tokens"),
        (["--law", "25+0.4b", "--max-utilization", "1.5"], "--max-utilization"),
        ([], "give a RESULTS file to plan from, --law for a what-if, or --variant for a fleet"),
        ([str(DATA / "results_v1.json"), "--law", "25+0.4b"], "give a RESULTS file or --law (what-if), not both"),
        ([str(DATA / "missing.json")], "no such results file"),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["plan", *args])
    assert result.exit_code in (2, 3)
    assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("key", ["lag_p99", "queue_p95"])
def test_profiles_and_flags_accept_exactly_the_same_slos(tmp_path: Path, key: str) -> None:
    """Issue 27: a profile could promise lag_p99_ms (the generator's own slip) and plan sized a fleet on it,
    while --slo refused the same key. One reader (SloTarget.from_key) now refuses both, naming what is allowed."""
    profile = tmp_path / "p.yaml"
    profile.write_text(f"target: {{sim: {{}}}}\nslo: {{{key}_ms: 5}}\n")
    shown = runner.invoke(app, ["profile", "show", str(profile)])
    flag = runner.invoke(app, ["plan", "--law", "25+0.4b", "--slo", f"{key}<5ms"])
    assert shown.exit_code == flag.exit_code == 2
    assert "METRIC one of ttft, ttft_sent, ttfo, tpot, itl, e2e" in " ".join(shown.output.split())
    assert "(METRIC: ttft, ttft_sent, ttfo, tpot, itl, e2e)" in " ".join(flag.output.split())
