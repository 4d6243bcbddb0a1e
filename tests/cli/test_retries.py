"""``--retries``: a level the measurement made untrusted is measured again; the service's own answer never is.

In virtual time against the simulator, so what is retried, how often and why is exact: a window shorter
than three request lifetimes (64 tokens of 25.8 ms: a 1.65 s lifetime), or one where only the clients' first
requests (not timed) ended, is the measurement's fault and
doubles on each attempt; a server failing a third of its requests is the service's answer.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load, save_atomic
from planner.ci.gate import evaluate_gate, parse_check

runner = CliRunner()
SHORT_WINDOW = ["run", "--url", "sim", "--virtual-time", "--concurrency", "2", "--warmup", "0.5", "--max-tokens", "64",
                "--quiet"]  # fmt: skip


def test_a_window_too_short_is_measured_again_longer_until_trusted(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, [*SHORT_WINDOW, "--duration", "1", "--retries", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    results = load(out)
    level = results.levels[0]
    assert level.attempt == 4 and level.window_s >= 3 * 1.65  # 1 -> 2 -> 4 -> 8 s
    assert [r.attempt for r in results.retried] == [1, 2, 3]
    assert [r.level.window_s for r in results.retried] == pytest.approx([1.0, 2.0, 4.0])
    assert "no request completed" in results.retried[0].reason  # 1 s: not one 1.65 s request
    assert "only the clients' first requests" in results.retried[1].reason  # 2 s: the ramp's round, untimed
    assert "shorter than 3 request lifetimes" in results.retried[2].reason
    gate = runner.invoke(app, ["gate", str(out), "--require", "tpot_p50 < 100ms", "--json"])
    doc = json.loads(gate.stdout)
    assert gate.exit_code == 0 and doc["side"] is None
    assert doc["summary"] == "pass (c=2 trusted on attempt 4 of 4)"


def test_still_untrusted_after_every_attempt_is_the_runners_failure(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, [*SHORT_WINDOW, "--duration", "0.5", "--retries", "1", "-o", str(out)])
    assert load(out).levels[0].attempt == 2, result.output
    gate = runner.invoke(app, ["gate", str(out), "--require", "tpot_p50 < 100ms"])
    assert gate.exit_code == 3
    assert gate.stdout.strip().splitlines()[-1] == (
        "**runner: 1 of 1 levels untrusted after 2 attempts (the measurement, not the service: see above)**"
    )


@pytest.mark.parametrize(("failing", "exit_code"), [(0.05, 1), (0.3, 3)])
def test_the_services_errors_are_its_answer_and_never_measured_again(
    tmp_path: Path, failing: float, exit_code: int
) -> None:
    # 5% failing: a trusted level that breaches the 1% error budget (exit 1); 30%: above the untrusted
    # rate, the latencies describe a biased subset (exit 3). Both are the service's, neither retried.
    profile = tmp_path / "p.yaml"
    profile.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "name": "failing",
                "target": {"sim": {"faults": {"http_500": failing}}},
                "workload": {"prompt_tokens": 16, "output_tokens": 8},
                "load": {"mode": "closed", "levels": [4], "duration_s": 10, "warmup_s": 0.5, "retries": 2},
                "slo": {"error_rate": 0.01},
                "seed": 3,
            }
        )
    )
    out = tmp_path / "s.json"
    runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "-o", str(out), "--quiet"])
    results = load(out)
    assert results.levels[0].attempt == 1 and not results.retried
    gate = runner.invoke(app, ["gate", str(out), "--json"])
    doc = json.loads(gate.stdout)
    assert gate.exit_code == exit_code and doc["side"] == "service"
    if exit_code == 1:
        assert doc["summary"] == "service failed: 1 check(s) breached"
    else:
        assert doc["summary"].startswith("service untrusted: c=4: ") and "requests failed" in doc["summary"]


def test_a_busy_runner_is_named_as_such(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    runner.invoke(app, [*SHORT_WINDOW, "--duration", "8", "-o", str(out)])
    results = load(out)
    window = results.levels[0].window_s  # as if another process held the core most of the window
    busy = replace(
        results, levels=(replace(results.levels[0], client_cpu_s=0.3 * window, runqueue_wait_s=0.9 * window),)
    )
    assert busy.levels[0].client_bound
    save_atomic(busy, out)
    verdict = evaluate_gate(load(out), [parse_check("tpot_p50 < 100ms")])
    assert verdict.exit_code == 3 and verdict.side == "runner"
    assert verdict.summary == "runner busy: 1 of 1 levels untrusted"
