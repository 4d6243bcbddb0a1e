"""Issue 55 item 1: every plan leads with the decision, in the words of the action, each caveat once."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load, save_atomic
from planner.evidence.said_once import said_once

runner = CliRunner()


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The README's main job in virtual time: the sweep file and what the sweep printed."""
    out = tmp_path_factory.mktemp("decision") / "sweep.json"
    result = runner.invoke(app, ["sweep", "--profile", "quickstart", "--virtual-time", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.stdout


def test_the_plan_leads_with_the_server_flag_and_the_replica_count(quickstart: tuple[Path, str]) -> None:
    sweep, _ = quickstart
    result = runner.invoke(app, ["plan", str(sweep), "--qps", "40", "--output-tokens", "200"], terminal_width=120)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("set --max-num-seqs 37") and "tpot_p95 stays <= 40 ms" in lines[0]
    flat = " ".join(result.stdout.split())
    assert "run 11 replicas for 40 requests/s x 200 output tokens (8,000 tok/s); bound by ttft_p95 <= 1000 ms" in flat
    assert len(lines) <= 25, result.stdout
    repeated = [line for line, n in Counter(line.strip() for line in lines if line.strip()).items() if n > 1]
    assert not repeated, repeated
    # the caveat about the mix says what to do about it; the details wait behind --explain
    assert "this plan asks for output 200 tokens, so sweep that mix" in flat
    assert "simulated:" not in flat and "--explain" in flat
    explained = runner.invoke(app, ["plan", str(sweep), "--qps", "40", "--output-tokens", "200", "--explain"])
    assert explained.stdout.startswith(result.stdout.split("\n--explain")[0][:40])
    assert "simulated: 11 pass" in " ".join(explained.stdout.split())


def test_the_sweep_ends_with_the_same_decision_and_says_each_caveat_once(quickstart: tuple[Path, str]) -> None:
    sweep, printed = quickstart
    planned = runner.invoke(app, ["plan", str(sweep)], terminal_width=120)
    flat_sweep, flat_plan = " ".join(printed.split()), " ".join(planned.stdout.split())
    decision = flat_plan.split(" evidence:")[0]
    assert decision.startswith("set --max-num-seqs 37") and decision in flat_sweep
    assert flat_sweep.count("measured in virtual time") == 1


def test_the_what_if_plan_names_the_change_to_what_runs_now() -> None:
    args = ["plan", "--law", "25+0.4b", "--slo", "tpot_p95<60ms", "--qps", "40", "--output-tokens", "200"]
    result = runner.invoke(app, [*args, "--current-batch", "64", "--replicas", "5"], terminal_width=120)
    flat = " ".join(result.stdout.split())
    assert flat.startswith("set --max-num-seqs 87 the largest batch whose tpot_p95 stays <= 60 ms")
    assert "run 7 replicas" in flat and "Raising --max-num-seqs to 87" in flat and "Add 2" in flat


def test_the_same_caveat_for_several_levels_is_said_once_naming_them() -> None:
    notes = [
        "c=32: client-bound (lag)",
        "c=48: client-bound (lag)",
        "r=2.5/s: 3 failed",
        "virtual time",
        "virtual time",
    ]
    assert said_once(notes) == ["c=32, c=48: client-bound (lag)", "r=2.5/s: 3 failed", "virtual time"]


def test_a_batch_the_sweep_never_bounded_says_to_sweep_higher(quickstart: tuple[Path, str]) -> None:
    sweep, _ = quickstart
    result = runner.invoke(app, ["plan", str(sweep), "--slo", "tpot_p95<100ms"], terminal_width=200)
    flat = " ".join(result.stdout.split())
    assert flat.startswith("set --max-num-seqs >= ") and "sweep higher concurrency to find the largest" in flat


def test_a_flat_law_says_any_batch_meets_the_slo_and_a_growing_one_does_not() -> None:
    """Issue 73: `plan --law 25+0b --slo 'tpot_p95<40ms'` printed no decision at all."""
    flat = runner.invoke(app, ["plan", "--law", "25+0b", "--slo", "tpot_p95<40ms"])
    assert flat.exit_code == 0, flat.output
    assert " ".join(flat.stdout.split()).startswith("any batch meets the SLO tpot_p95 <= 40 ms at every batch")
    growing = runner.invoke(app, ["plan", "--law", "25+0.4b", "--slo", "tpot_p95<40ms"])
    assert growing.stdout.startswith("set --max-num-seqs 37") and "any batch" not in growing.stdout


def test_levels_the_plan_and_its_evidence_both_call_client_bound_are_one_caveat(
    quickstart: tuple[Path, str], tmp_path: Path
) -> None:
    """Seen on vLLM's CPU build: 'c=2, c=8: client-bound (... 69..85% ...)' was caveat 2 and caveat 7."""
    results = load(quickstart[0])
    starved = [replace(lv, client_cpu_s=0.2 * lv.window_s, runqueue_wait_s=share * lv.window_s)
               for lv, share in zip(results.levels[:2], (0.7, 0.85), strict=True)]  # fmt: skip
    busy = tmp_path / "busy.json"
    save_atomic(replace(results, levels=(*starved, *results.levels[2:])), busy)
    result = runner.invoke(app, ["plan", str(busy)])
    assert result.exit_code == 0, result.output
    said = [line for line in result.stdout.splitlines() if "client-bound" in line]
    assert len(said) == 1 and "c=2, c=4: client-bound" in said[0], said


def starved(results_path: Path, out: Path, labels: tuple[str, ...]) -> Path:
    """The sweep with ``labels``' generator waiting 80% of the window for its core (client-bound)."""
    results = load(results_path)
    levels = tuple(
        replace(lv, client_cpu_s=0.2 * lv.window_s, runqueue_wait_s=0.8 * lv.window_s)
        if lv.load.label in labels
        else lv
        for lv in results.levels
    )
    save_atomic(replace(results, levels=levels), out)
    return out


def test_a_batch_between_untrusted_levels_says_so_on_its_action_line(
    quickstart: tuple[Path, str], tmp_path: Path
) -> None:
    """Issue 73: on a busy machine the crossing between two client-bound levels read clean ('[resolved]', no
    word on the action lines); only the evidence line said how many levels were untrusted."""
    busy = starved(quickstart[0], tmp_path / "busy.json", ("c=32", "c=48"))
    said = " ".join(runner.invoke(app, ["plan", str(busy), "--explain"]).stdout.split())
    action = said.split("run 11 replicas")[0]
    assert action.startswith("set --max-num-seqs 37") and "UNTRUSTED: from c=32, c=48 (client-bound)" in action
    assert "measure them again on a quieter machine (or with --retries) before acting" in action
    assert "UNTRUSTED: sized on the batch above, from the same levels" in said
    assert "[resolved between untrusted levels c=32, c=48: client-bound]" in said and "[resolved]" not in said
    report = " ".join(runner.invoke(app, ["report", str(busy)]).stdout.split())
    assert "(the batch rests on untrusted levels c=32, c=48: client-bound)" in report


def test_untrusted_levels_far_from_the_batch_leave_its_action_line_alone(
    quickstart: tuple[Path, str], tmp_path: Path
) -> None:
    busy = starved(quickstart[0], tmp_path / "busy.json", ("c=2", "c=4"))
    said = " ".join(runner.invoke(app, ["plan", str(busy), "--explain"]).stdout.split())
    assert "UNTRUSTED" not in said and "[resolved]" in said


def test_a_server_that_stopped_answering_is_named_first(quickstart: tuple[Path, str], tmp_path: Path) -> None:
    """Issue 73: after a dead server the plan's first line blamed the SLO and the server was caveat 4 of 10."""
    results = load(quickstart[0])
    levels = list(results.levels[:5])
    levels[-1] = replace(levels[-1], target_gone=True, complete=False, outage_s=10.2)
    gone = tmp_path / "gone.json"
    save_atomic(replace(results, levels=tuple(levels), complete=False), gone)
    said = runner.invoke(app, ["plan", str(gone)]).stdout
    flat = " ".join(said.split())
    assert flat.startswith("the server stopped answering at c=32 (nothing answered for the last 10.2 s)"), flat
    assert "UNTRUSTED: from c=32 (the server failed): read the caveats before acting" in flat
    assert "caveats, most serious first: 1. c=32: the server stopped answering" in flat
