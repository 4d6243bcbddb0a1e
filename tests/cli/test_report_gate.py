"""Reports, the CI gate and compare, on real simulator sweeps."""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.histogram import LatencyHistogram
from loadgen.quantity import Metric
from loadgen.results import load, save_atomic

runner = CliRunner()


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def ci_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gate") / "candidate.json"
    result = invoke("sweep", "--profile", "ci-gate", "-o", str(out), "--quiet", "--virtual-time")
    assert result.exit_code == 0, result.output
    return out


def test_html_report_is_self_contained_with_five_plots(ci_sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert invoke("report", str(ci_sweep), "-o", str(out)).exit_code == 0
    text = out.read_text()
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', text)) == 5
    assert not re.search(r'(src|href)="https?:', text) and "url(" not in text and "<script" not in text
    for expected in ("loadgen 0.1.0", "ci-gate", "127.0.0.1", "metric definitions", "SLO verdicts", "Decision"):
        assert expected in text
    # issue 55: the decision and its plots in the first screen; the evidence below, the definitions last
    order = [text.index(mark) for mark in ("<h2>Decision", "<img ", "<h2>Levels", "<h2>Appendix: metric definitions")]
    assert order == sorted(order), order


def test_markdown_tables_are_well_formed(ci_sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    assert invoke("report", str(ci_sweep), "-o", str(out)).exit_code == 0
    lines = out.read_text().splitlines()
    tables: list[list[str]] = []
    for line in lines:
        if line.startswith("|"):
            if not tables or not lines[lines.index(line) - 1].startswith("|"):
                tables.append([])
            tables[-1].append(line)
    assert len(tables) >= 2
    for table in tables:
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in table}
        assert len(widths) == 1, table  # every row has the header's number of cells
        assert re.fullmatch(r"\|(-{3,}:?\|)+", table[1])


def test_csv_has_one_row_per_level(ci_sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.csv"
    assert invoke("report", str(ci_sweep), "-o", str(out)).exit_code == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["load_value"] for r in rows] == ["8", "32"]
    assert float(rows[0]["tpot_p50_ms"]) == pytest.approx(25 + 0.4 * 8, rel=0.05)


def test_lenient_gate_passes_and_impossible_fails(ci_sweep: Path, tmp_path: Path) -> None:
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    ok = invoke(
        "gate",
        str(ci_sweep),
        "--require",
        "tpot_p95 < 200ms",
        "--require",
        "error_rate < 1%",
        "--fail-if",
        "ttft_p95 > 5s",
        "--junit",
        str(junit),
        "--summary-md",
        str(summary),
    )
    assert ok.exit_code == 0, ok.output
    bad = invoke(
        "gate",
        str(ci_sweep),
        "--require",
        "tpot_p95 < 5ms",
        "--junit",
        str(junit),
        "--summary-md",
        str(summary),
        "--json",
    )
    assert bad.exit_code == 1
    assert json.loads(bad.stdout)["status"] == "fail"
    assert summary.read_text().count("### loadgen gate") == 2  # appended, not overwritten
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None and int(suite.get("failures", "0")) >= 2 and suite.get("tests")
    cases = suite.findall("testcase")
    assert len(cases) == int(suite.get("tests", "0"))
    assert all(c.get("classname") and c.get("name") for c in cases)
    assert sum(1 for c in cases if c.find("failure") is not None) == int(suite.get("failures", "0"))


def test_profile_slo_gate_and_per_level_check(ci_sweep: Path) -> None:
    assert invoke("gate", str(ci_sweep)).exit_code == 0  # the ci-gate profile's own SLOs
    assert invoke("gate", str(ci_sweep), "--require", "output_tokens_per_s > 100000 @c=8").exit_code == 1
    assert invoke("gate", str(ci_sweep), "--require", "tpot_p95 < 1s @c=999").exit_code == 3


def test_untrustworthy_runs_exit_3(ci_sweep: Path, tmp_path: Path) -> None:
    results = load(ci_sweep)
    incomplete = tmp_path / "incomplete.json"
    save_atomic(replace(results, complete=False), incomplete)
    assert invoke("gate", str(incomplete), "--require", "tpot_p95 < 1s").exit_code == 3
    lag = LatencyHistogram()
    for _ in range(100):
        lag.record_us(50_000)  # 50 ms of generator lag: the client was the bottleneck
    level = results.levels[0]
    bound = replace(results, levels=(replace(level, histograms={**level.histograms, Metric.LAG: lag}),))
    path = tmp_path / "bound.json"
    save_atomic(bound, path)
    result = invoke("gate", str(path), "--require", "tpot_p95 < 1s")
    assert result.exit_code == 3 and "client-bound" in result.stdout


@pytest.mark.parametrize(
    ("text", "flag"), [("tpot_p95 <", "--require"), ("latency < 3ms", "--require"), ("error_rate < 5ms", "--fail-if")]
)
def test_bad_check_grammar_is_a_usage_error(ci_sweep: Path, text: str, flag: str) -> None:
    result = invoke("gate", str(ci_sweep), flag, text)
    assert result.exit_code == 2 and flag in result.stderr and "Traceback" not in result.output


def sweep_at_64(tmp_path: Path, name: str, per_seq_ms: float, seed: int) -> Path:
    # A noisy engine (each step's time drawn around the law, CV 10%, its own seed per run) in virtual
    # time: two runs of one build differ as runs do, with no machine noise on top to blur the verdict.
    profile = tmp_path / f"{name}.yaml"
    profile.write_text(
        f"target: {{sim: {{per_seq_ms: {per_seq_ms}, noise_cv: 0.1, seed: {seed}}}}}\napi: completions\n"
        "workload: {output_tokens: 16, prompt_tokens: 8}\nload: {levels: [64], duration_s: 10, warmup_s: 2}\n"
    )
    out = tmp_path / f"{name}.json"
    result = invoke("sweep", "--profile", str(profile), "-o", str(out), "--quiet", "--virtual-time")
    assert result.exit_code == 0, result.output
    return out


def test_baseline_rerun_passes_and_a_slower_law_is_a_regression(tmp_path: Path) -> None:
    base = sweep_at_64(tmp_path, "base", 0.4, seed=1)
    rerun = sweep_at_64(tmp_path, "rerun", 0.4, seed=2)
    slower = sweep_at_64(tmp_path, "slower", 0.6, seed=3)  # per_seq_ms +50%: TPOT at batch 64 +25%
    same = invoke("gate", str(rerun), "--baseline", str(base), "--json")
    assert same.exit_code == 0, same.stdout
    worse = invoke("gate", str(slower), "--baseline", str(base), "--json")
    assert worse.exit_code == 1
    regressed = {r["quantity"] for r in json.loads(worse.stdout)["regressions"] if r["regression"]}
    assert {"tpot_p50", "tpot_p95"} <= regressed, worse.stdout
    # two runs of the baseline build: their mean is the baseline, their spread the runner's noise
    pooled = invoke("gate", str(slower), "--baseline", str(base), "--baseline", str(rerun), "--json")
    assert pooled.exit_code == 1 and {r["baseline_runs"] for r in json.loads(pooled.stdout)["regressions"]} == {2}
    said = invoke("gate", str(rerun), "--baseline", str(base), "--baseline", str(slower))
    assert "the mean of 2 runs" in said.stdout, said.stdout
    table = invoke("compare", str(base), str(rerun), str(slower))
    assert table.exit_code == 0 and "tpot_p50" in table.stdout and "*" in table.stdout
    doc = json.loads(invoke("compare", str(base), str(slower), "--json").stdout)
    assert any(d["regression"] for d in doc["comparisons"][0]["deltas"])


@pytest.mark.parametrize("command", ["gate", "report", "plan", "compare"])
def test_a_missing_results_file_is_a_usage_error_and_a_corrupt_one_untrusted(command: str, tmp_path: Path) -> None:
    # The gate's exit table: 2 for a file argument that names nothing, 3 for data that cannot be trusted.
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema": "loadgen.results"')
    extra = [str(corrupt)] if command == "compare" else []
    missing = runner.invoke(app, [command, str(tmp_path / "missing.json"), *extra])
    assert missing.exit_code == 2 and "no such results file" in missing.stderr
    if command != "compare":
        broken = runner.invoke(app, [command, str(corrupt)])
        assert broken.exit_code == 3 and "Traceback" not in broken.output


def test_the_report_leads_with_a_one_line_headline_in_every_format(tmp_path: Path) -> None:
    stored = Path(__file__).parents[1] / "data" / "results_v1_sweep.json"
    as_json = runner.invoke(app, ["report", str(stored), "--json"])
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    assert doc["headline"] == (
        "max batch 16 (the server's saturation plateau B); 5 level(s), 2 untrusted (the batch rests on untrusted "
        "levels c=32: too short a window)."
    )
    # the decision first (what to set, and why), then the evidence
    assert doc["sections"][0]["title"] == "Decision"
    assert doc["sections"][0]["table"][0]["do"] == "set --max-num-seqs 16"
    assert doc["sections"][0]["table"][0]["why"].endswith(
        "UNTRUSTED: from c=32 (too short a window): measure them again with a longer --duration before acting"
    )
    levels = next(s for s in doc["sections"] if s["title"] == "Levels")
    assert levels["table"][0]["load"] == "c=4"
    md = tmp_path / "r.md"
    assert runner.invoke(app, ["report", str(stored), "-o", str(md)]).exit_code == 0
    assert md.read_text().splitlines()[:3] == ["# Capacity report: sim-model", "", f"**{doc['headline']}**"]


def test_server_text_in_markdown_is_text_not_html(ci_sweep: Path, tmp_path: Path) -> None:
    """Issue 31, item 21: a model id '<script>...' reached report.md and the gate summary raw (HTML escaped it)."""
    hostile = '<script>alert("x")</script> | <img src=x onerror=alert(1)>'
    results = load(ci_sweep)
    poisoned = tmp_path / "poisoned.json"
    save_atomic(replace(results, target=replace(results.target, model=hostile)), poisoned)
    report, summary = tmp_path / "report.md", tmp_path / "summary.md"
    assert invoke("report", str(poisoned), "-o", str(report)).exit_code == 0
    invoke("gate", str(poisoned), "--require", "tpot_p95<1ms", "--summary-md", str(summary))
    for path in (report, summary):
        text = path.read_text()
        assert "<script" not in text and "<img" not in text, path
    assert "&lt;script>" in report.read_text() and "tpot_p95<1ms" in summary.read_text()  # comparisons read as written


@pytest.mark.parametrize("command", ["gate", "plan", "report"])
@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("completed",), 1e400, "completed"),  # json writes it as Infinity, as 1e400 reads
        (("window_s",), float("nan"), "window_s"),
        (("errors",), {"http_5xx": -30}, "errors.http_5xx"),
        (("load", "value"), float("inf"), "load.value"),
    ],
    ids=["count-1e400", "nan-window", "negative-count", "infinite-load"],
)
def test_impossible_numbers_in_a_results_file_are_one_line_and_untrusted(
    ci_sweep: Path, tmp_path: Path, command: str, path: tuple[str, ...], value: object, field: str
) -> None:
    """Issue 31, item 11: 1e400 or Infinity ended in an OverflowError traceback (exit 1); a negative count
    or a NaN window was read silently ("-30 failed requests", a NaN window left the level trusted)."""
    doc = json.loads(ci_sweep.read_text())
    node = doc["levels"][0]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    done = runner.invoke(app, [command, str(bad)])
    assert done.exit_code == 3 and "Traceback" not in done.output, done.output
    assert "corrupt results file" in done.stderr and field in done.stderr


def test_compare_names_files_of_one_name_by_their_folders(tmp_path: Path) -> None:
    # Two runs saved as sweep.json in their own folders were two identical columns (issue 30).
    stored = Path(__file__).parents[1] / "data" / "results_v1_sweep.json"
    for folder in ("before", "after"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "sweep.json").write_text(stored.read_text())
    result = runner.invoke(
        app,
        ["compare", str(tmp_path / "before" / "sweep.json"), str(tmp_path / "after" / "sweep.json")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "before/sweep.json" in result.stdout and "after/sweep.json" in result.stdout


@pytest.mark.parametrize("command", ["compare", "gate"])
def test_runs_the_prefix_cache_served_unlike_are_compared_with_a_warning(command: str, tmp_path: Path) -> None:
    # A dataset's prompts sent again to a server that kept them: vLLM served 74% of a rerun's prompt tokens
    # from its prefix cache, and its TTFT read a prefill it skipped.
    stored = json.loads((Path(__file__).parents[1] / "data" / "results_v1_sweep.json").read_text())
    for name, hits in (("cold.json", 0), ("warm.json", 7400)):
        for level in stored["levels"]:
            level["server"].update(prefix_cache_queried=10_000, prefix_cache_hits=hits)
        (tmp_path / name).write_text(json.dumps(stored))
    cold, warm = str(tmp_path / "cold.json"), str(tmp_path / "warm.json")
    result = runner.invoke(app, [command, "--baseline", cold, warm] if command == "gate" else [command, cold, warm])
    assert result.exit_code in (0, 1, 3), result.output
    assert "prefix cache served" in result.stderr and "c=4 0% vs 74%" in result.stderr
    same = runner.invoke(app, ["compare", str(tmp_path / "warm.json"), str(tmp_path / "warm.json")])
    assert same.exit_code == 0 and "prefix cache" not in same.stderr


def test_trusted_levels_that_breach_fail_the_service_whatever_the_untrusted_ones_say(
    ci_sweep: Path, tmp_path: Path
) -> None:
    """Issue 56 item 4: from a busy machine the gate said 'runner busy' (exit 3) though every trusted level
    failed the check: a CI job would retry the runner instead of fixing the service."""
    results = load(ci_sweep)
    lag = LatencyHistogram()
    for _ in range(100):
        lag.record_us(50_000)  # 50 ms of generator lag: client-bound
    first = results.levels[0]
    busy = replace(
        results, levels=(replace(first, histograms={**first.histograms, Metric.LAG: lag}), *results.levels[1:])
    )
    path = tmp_path / "busy.json"
    save_atomic(busy, path)
    breach = invoke("gate", str(path), "--require", "tpot_p95 < 1ms", "--json")
    assert breach.exit_code == 1, breach.output
    doc = json.loads(breach.stdout)
    assert doc["side"] == "service" and first.load.label in doc["summary"], doc["summary"]
    passing = invoke("gate", str(path), "--require", "tpot_p95 < 10s")
    assert passing.exit_code == 3 and "runner busy" in passing.stdout  # untrusted levels alone: the runner's


def test_a_length_spread_answered_in_full_is_no_short_answer(tmp_path: Path) -> None:
    """Issue 69: the chat profile sends ignore_eos and draws each request's max_tokens from a spread; the
    simulator honours it, so each answer is as long as its own ask. Compared with the profile's mean, the
    window's draws (short ones finish more often) read as answers cut short: a false caveat."""
    out = tmp_path / "chat.json"
    done = invoke("sweep", "--profile", "chat", "--url", "sim", "--virtual-time", "--levels", "1,8", "-o", str(out))
    assert done.exit_code == 0, done.output
    level = load(out).levels[0]
    assert level.asked_output_tokens == level.output_tokens  # every answer as long as its own ask
    text = " ".join(invoke("report", str(out)).output.split())
    assert "answers averaged" not in text and "ignore_eos" not in text


def _ci_gate_on(tmp_path: Path, name: str, base_ms: float, per_seq_ms: float, seed: int) -> Path:
    """The ci-gate load on a stated law in virtual time, SLOs removed (only the comparison can fail)."""
    profile = tmp_path / f"{name}.yaml"
    profile.write_text(
        f"name: {name}\ntarget: {{sim: {{base_ms: {base_ms}, per_seq_ms: {per_seq_ms}}}}}\napi: completions\n"
        "workload: {prompt_tokens: 32, output_tokens: 16}\n"
        "load: {mode: closed, levels: [8, 32], duration_s: 6, warmup_s: 1}\n"
        f"stop: {{slo_breach_factor: null, stop_on_saturation: false}}\nseed: {seed}\n"
    )
    out = tmp_path / f"{name}.json"
    done = invoke("sweep", "--profile", str(profile), "--virtual-time", "--quiet", "-o", str(out))
    assert done.exit_code == 0, done.output
    return out


def test_noiseless_runs_are_compared_exactly_and_a_10_percent_slower_law_fails(tmp_path: Path) -> None:
    """Issue 56: a server 20% slower read tok/s -17% and req/s -17% as 'worse (noise)': virtual-time runs of
    one law have no noise, yet were judged by a busy runner's noise model."""
    base = _ci_gate_on(tmp_path, "base", 25.0, 0.4, 1)
    slower = _ci_gate_on(tmp_path, "slower", 27.5, 0.44, 1)
    reseeded = _ci_gate_on(tmp_path, "reseeded", 25.0, 0.4, 2)
    gate = invoke("gate", str(slower), "--baseline", str(base), "--allow-mismatch", "--json")
    assert gate.exit_code == 1, gate.output
    deltas = json.loads(gate.stdout)["regressions"]  # every compared quantity, each with its verdict
    regressed = {d["quantity"] for d in deltas if d["regression"]}
    assert all(d["detectable"] == 0 for d in deltas)
    assert {"tpot_p50", "tpot_p95", "output_tokens_per_s", "requests_per_s"} <= regressed, regressed
    assert "| exact |" in invoke("gate", str(slower), "--baseline", str(base), "--allow-mismatch").stdout
    same = invoke("gate", str(reseeded), "--baseline", str(base), "--allow-mismatch")
    assert same.exit_code == 0, same.output


def test_compare_cells_carry_their_units(ci_sweep: Path) -> None:
    """Issue 55: a compare cell read ``438.0`` with no unit; a latency is in ms, throughput in tok/s or req/s."""
    result = runner.invoke(app, ["compare", str(ci_sweep), str(ci_sweep)], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = {cells[2].strip(): cells[3:5] for line in result.stdout.splitlines() if len(cells := line.split("│")) > 4}
    assert rows["ttft_p95"][0].strip().endswith(" ms") and rows["output_tokens_per_s"][0].strip().endswith(" tok/s")
    assert rows["requests_per_s"][1].strip().startswith(rows["requests_per_s"][0].strip())  # "4.6 req/s (+0.0%)"
    assert rows["error_rate"][0].strip().endswith("%")
