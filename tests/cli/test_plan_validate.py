"""``loadgen plan RESULTS --validate RECORDS``: a measured run replayed through the plan's sizing simulation."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loadgen.cli import app

runner = CliRunner()


def _calibrate(folder: Path, base_ms: float) -> Path:
    """A closed sweep of the simulator (law base_ms + 0.4*b, the ``--url sim`` server's cap) in virtual time."""
    profile = folder / f"calibrate-{base_ms:g}.yaml"
    profile.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "name": "calibrate",
                "target": {"sim": {"base_ms": base_ms, "per_seq_ms": 0.4, "max_num_seqs": 128}},
                "api": "completions",
                "workload": {"prompt_tokens": 64, "output_tokens": 32},
                "load": {"mode": "closed", "levels": [1, 4, 8, 16], "duration_s": 6, "warmup_s": 2},
                "seed": 1,
            }
        )
    )
    out = folder / f"calibrate-{base_ms:g}.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "-o", str(out), "--virtual-time", "--quiet"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An open-loop run at 8 requests/s on the simulator's law 25 + 0.4*b (``--url sim``), every request recorded."""
    folder = tmp_path_factory.mktemp("open")
    path = folder / "open.jsonl"
    flags = "run --url sim --virtual-time --rate 8 --duration 40 --api completions --prompt-tokens 64 --max-tokens 32"
    outputs = ["--records", str(path), "-o", str(folder / "open.json"), "--quiet", "--seed", "2"]
    result = runner.invoke(app, [*flags.split(), *outputs])
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.parametrize(("base_ms", "verdict"), [(25, "agrees"), (12, "optimistic"), (45, "pessimistic")])
def test_the_replay_agrees_with_the_law_that_served_the_run_and_names_the_side_of_a_wrong_one(
    records: Path, tmp_path: Path, base_ms: float, verdict: str
) -> None:
    """Calibrated on the law that served the run, the replay reads what the clients measured; calibrated on a
    faster law it is optimistic (a replica count sized from it is not the conservative side), on a slower one
    pessimistic."""
    calibration = _calibrate(tmp_path, base_ms)
    args = ["plan", str(calibration), "--current-batch", "128", "--validate", str(records)]
    doc = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    [check] = doc["validation"]
    assert check["verdict"] == verdict, check
    assert check["requests"] > 250 and check["rate_rps"] == pytest.approx(8, rel=0.15)
    ratios = {row["statistic"]: row["ratio"] for row in check["rows"]}
    assert set(ratios) == {"ttft_p50", "ttft_p95", "e2e_mean", "e2e_p95"}
    if verdict == "agrees":
        assert ratios["e2e_mean"] == pytest.approx(1.0, abs=0.03)  # the same law, the same sends: the same times
    text = " ".join(runner.invoke(app, args).stdout.split())
    assert "VALIDATION: the measured run replayed through the sizing simulation" in text
    assert f"r=8/s: {verdict}:" in text


def test_a_broken_or_missing_records_file_is_one_line(records: Path, tmp_path: Path) -> None:
    calibration = _calibrate(tmp_path, 25)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(records.read_text().splitlines()[0] + "\nnot json\n")
    no_batch = runner.invoke(app, ["plan", str(calibration), "--validate", str(records)])
    assert no_batch.exit_code == 2 and "give --current-batch (the server's --max-num-seqs)" in no_batch.stderr
    result = runner.invoke(app, ["plan", str(calibration), "--current-batch", "128", "--validate", str(broken)])
    assert result.exit_code == 3 and f"--validate {broken}, line 2: not a JSON record" in result.stderr
    missing = runner.invoke(
        app, ["plan", str(calibration), "--current-batch", "128", "--validate", str(tmp_path / "none.jsonl")]
    )
    assert missing.exit_code == 2 and "no such records file" in missing.stderr
    assert "Traceback" not in result.output + missing.output


def test_a_plan_for_a_qps_sizes_its_replicas_with_what_the_endpoint_measured(records: Path, tmp_path: Path) -> None:
    """Calibrated on a law twice as fast at idle (base 12 where 25 served the run), the sweep alone under-provisions;
    given the open-loop run, the plan sizes with its correction and asks for what the true law's plan asks."""
    sizing = ["--current-batch", "128", "--qps", "40", "--slo", "ttft_p95<60ms", "--json"]

    def planned(calibration: Path, *extra: str) -> dict[str, Any]:
        result = runner.invoke(app, ["plan", str(calibration), *sizing, *extra])
        assert result.exit_code == 0, result.output
        return dict(json.loads(result.stdout))

    fast = _calibrate(tmp_path, 12)
    alone, corrected, truth = (
        planned(fast),
        planned(fast, "--validate", str(records)),
        planned(_calibrate(tmp_path, 25)),
    )
    assert alone["replicas"] < truth["replicas"] == corrected["replicas"]
    assert "corrected by the endpoint (steps x1.8" in corrected["replicas_method"], corrected["replicas_method"]
    [check] = corrected["validation"]
    assert check["verdict"] == "optimistic" and check["correction"]["step_factor"] > 1.5
    corrected_rows = {row["statistic"]: row["simulated_ms"] for row in check["corrected"]}
    measured_rows = {row["statistic"]: row["measured_ms"] for row in check["rows"]}
    assert corrected_rows["e2e_mean"] == pytest.approx(measured_rows["e2e_mean"], rel=0.02)
    # the batch rests on the sweep's law: steps 1.8x slower on the endpoint break a TPOT SLO it met there
    tpot = planned(fast, "--validate", str(records), "--slo", "tpot_p50<25ms")  # batch 31: 24.1 ms, 44.5 there
    assert any("the endpoint's steps ran x1.8" in w and "over tpot_p50_ms 25" in w for w in tpot["warnings"])


def test_an_slo_no_replica_count_can_meet_is_said_not_sized() -> None:
    """A TTFT limit below one request's own prefill step: no count of replicas helps, so none is recommended (it used
    to search to 10,000 replicas and end in a traceback)."""
    args = ["plan", "--law", "25+0.4b", "--qps", "10", "--output-tokens", "32", "--current-batch", "16"]
    result = runner.invoke(app, [*args, "--slo", "ttft_p95<5ms", "--explain"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "recommended: none: no replica count meets the SLOs in simulation" in text
    assert re.search(r"still reads ttft_p95_ms [0-9.]+ ms > 5 ", text) and "Traceback" not in result.output
    assert "More replicas cannot meet it: a faster first token can" in text  # the diagnosis, not "no breach found"
    doc = json.loads(runner.invoke(app, [*args, "--slo", "ttft_p95<5ms", "--json"]).stdout)
    assert doc["replicas"] is None


def test_a_run_whose_client_sent_late_corrects_nothing(records: Path, tmp_path: Path) -> None:
    """The same run, its schedule rewritten so every request went out 30 ms late: a client-bound run measured the
    load generator too, so the replay still reads it but takes no correction from it."""
    late = tmp_path / "late.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    late.write_text("".join(json.dumps({**r, "t_intended": r["t_sent"] - 0.030}) + "\n" for r in rows))
    calibration = _calibrate(tmp_path, 12)
    args = ["plan", str(calibration), "--current-batch", "128", "--qps", "40", "--slo", "ttft_p95<60ms", "--json"]
    doc = json.loads(runner.invoke(app, [*args, "--validate", str(late)]).stdout)
    [check] = doc["validation"]
    assert check["correction"] is None and "the client sent late (send lag p99 30.0 ms > 10 ms)" in check["note"]
    assert "corrected by the endpoint" not in doc["replicas_method"]
    on_time = json.loads(runner.invoke(app, [*args, "--validate", str(records)]).stdout)
    assert "corrected by the endpoint" in on_time["replicas_method"]  # the same run, sent on time


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"t_sent": -1e9}, "times no run records"),
        ({"output_tokens": 10**12}, "expected token counts up to"),
        ({"prompt_tokens": "many"}, "expected token counts up to"),
    ],
)
def test_impossible_records_are_refused_not_taken_at_face_value(
    records: Path, tmp_path: Path, change: dict[str, object], message: str
) -> None:
    """Issue 57 R13: t_sent -10^9 gave a TTFT correction of +10^12 ms; 10^12 output tokens a negative TTFT."""
    calibration = _calibrate(tmp_path, 25)
    edited = tmp_path / "edited.jsonl"
    edited.write_text(
        "".join(json.dumps({**json.loads(line), **change}) + "\n" for line in records.read_text().splitlines())
    )
    args = ["plan", str(calibration), "--current-batch", "128", "--qps", "8", "--validate", str(edited)]
    result = runner.invoke(app, args)
    assert result.exit_code == 3 and message in result.stderr and "line 1" in result.stderr, result.output
    assert "Traceback" not in result.output
