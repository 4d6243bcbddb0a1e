"""Every numeric flag and profile field is finite and in range, or one line naming it (exit 2)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ProfileError
from loadgen.inputs.profile import parse_profile
from loadgen.results import load

runner = CliRunner()
RUN = ["run", "--url", "sim", "--concurrency", "2", "--requests", "4", "--max-tokens", "4"]

FLAGS = {  # flag: (a valid value, the rule)
    "--duration": (1.0, lambda v: v > 0),
    "--warmup": (0.0, lambda v: v >= 0),
    "--ramp-up": (0.0, lambda v: v >= 0),
    "--prompt-spread": (0.0, lambda v: v >= 0),
    "--output-spread": (0.0, lambda v: v >= 0),
    "--timeout": (30.0, lambda v: v > 0),
    "--lag-threshold-ms": (10.0, lambda v: v > 0),
    "--burstiness": (1.0, lambda v: v > 0),
}
floats = st.floats(allow_nan=True, allow_infinity=True)


def refused(args: list[str], flag: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (args, result.output)
    assert flag in result.stderr and "Traceback" not in result.output


@settings(max_examples=40, deadline=None)
@given(flag=st.sampled_from(sorted(FLAGS)), value=floats)
def test_a_float_flag_out_of_range_or_not_finite_is_refused_naming_it(flag: str, value: float) -> None:
    ok = math.isfinite(value) and FLAGS[flag][1](value)
    if not ok:
        refused([*RUN, flag, repr(value)], flag)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--concurrency", "100000000"], "--concurrency"),
        (["--requests", "0"], "--requests"),
        (["--requests", "-3"], "--requests"),
        (["--prompt-tokens", "300000000"], "--prompt-tokens"),
        (["--max-tokens", "-1"], "--max-tokens"),
    ],
)
def test_integer_flags_out_of_range_are_refused(args: list[str], flag: str) -> None:
    base = ["run", "--url", "sim", "--concurrency", "2", "--requests", "4"]
    refused(base + args, flag)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--transport", "nope"],
            "error: Invalid value for '--transport': 'nope' is not one of 'native', 'aiohttp', 'httpx'; see 'loadgen run --help'",
        ),
        (["--concurrency", "abc"], "error: Invalid value for '--concurrency':"),
        (["--bogus"], "error: No such option: --bogus; see 'loadgen run --help'"),
        # issue 73: a near miss is named; a far one (click offered --insecure for this) is not
        (["--concurency", "2"], "error: No such option: --concurency (did you mean --concurrency?); see"),
        (["--insecur"], "error: No such option: --insecur (did you mean --insecure?); see"),
    ],
)
def test_a_value_or_flag_the_parser_refuses_is_one_line(args: list[str], line: str) -> None:
    """What typer's parser finds (a closed set's member, a number, a flag) reads like the commands' own errors:
    one line on stderr, exit 2 (typer's own box wrapped the message across the terminal's width)."""
    result = runner.invoke(app, ["run", "--url", "sim", *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(line) and result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""


def test_a_misspelt_flag_of_another_command_gets_no_unrelated_suggestion() -> None:
    result = runner.invoke(app, ["sweep", "--profile", "quickstart", "--concurency", "4"])
    assert result.exit_code == 2 and result.stderr.startswith("error: No such option: --concurency; see"), result.stderr


def test_output_paths_are_checked_before_the_run(tmp_path: Path) -> None:
    refused([*RUN, "-o", str(tmp_path)], "-o")
    refused([*RUN, "-o", str(tmp_path / "r.json"), "--records", str(tmp_path / "missing" / "r.jsonl")], "--records")
    refused([*RUN, "--header", "X-A:1\r\nX-B: 2"], "--header")


def test_a_budget_smaller_than_the_clients_starts_only_as_many_clients(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["run", "--url", "sim", "--concurrency", "5000", "--requests", "4",
                                 "--max-tokens", "2", "-o", str(out), "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    level = load(out).levels[0]
    assert level.completed + level.failed == 4 and level.achieved_concurrency <= 4.01


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(["duration_s", "warmup_s", "burstiness"]), value=floats)
def test_profile_numbers_are_finite_and_in_range_or_named(field: str, value: float) -> None:
    valid = math.isfinite(value) and (value >= 0 if field == "warmup_s" else value > 0)
    doc = {"load": {field: value}}
    if valid:
        assert parse_profile(doc, "p.yaml").load is not None
    else:
        with pytest.raises(ProfileError, match=rf"p\.yaml: load\.{field}: must be"):
            parse_profile(doc, "p.yaml")


@pytest.mark.parametrize("levels", [{"start": 1, "stop": math.inf}, {"start": 1, "stop": 1e15, "factor": 1.0000001},
                                    list(range(1, 300))])  # fmt: skip
def test_level_lists_are_finite_and_bounded(levels: object) -> None:
    with pytest.raises(ProfileError, match=r"load\.levels"):
        parse_profile({"load": {"levels": levels}}, "p.yaml")


def test_broken_files_are_one_line_each(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema": "loadgen.results", "schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = runner.invoke(app, ["report", str(deep)])
    assert result.exit_code == 3 and "nested too deeply" in result.stderr and "Traceback" not in result.output
    binary = tmp_path / "prompts.jsonl"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    result = runner.invoke(app, [*RUN, "--dataset", str(binary), "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 2 and "prompts.jsonl: not a text dataset" in result.stderr
    profile = tmp_path / "p.yaml"
    profile.write_text(f"workload: {{dataset: {tmp_path / 'missing.jsonl'}}}\n")
    result = runner.invoke(app, ["profile", "validate", str(profile)])
    assert result.exit_code == 2 and "workload.dataset: no such file" in result.stderr


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("X-A: héllo€", "--header 'X-A': a header value is ASCII text"),
        ("X-A: héllo", "--header 'X-A': a header value is ASCII text"),
        ("X A: b", "--header 'X A': a header name is letters, digits"),
    ],
)
def test_a_header_http_cannot_carry_is_one_line_before_the_run(header: str, message: str, tmp_path: Path) -> None:
    """Issue 31, item 18: --header 'X-A: héllo€' ended in a UnicodeEncodeError traceback at the first request."""
    done = CliRunner().invoke(
        app,
        [
            "run",
            "--url",
            "sim",
            "--virtual-time",
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--header",
            header,
            "-o",
            str(tmp_path / "r.json"),
        ],
    )
    assert done.exit_code == 2 and message in " ".join(done.output.split()), done.output
    assert not (tmp_path / "r.json").exists()


def test_a_profile_header_with_a_line_break_is_refused_by_name(tmp_path: Path) -> None:
    """Issue 31, item 13: CR/LF in profile headers validated, then failed at /models as a LocalProtocolError."""
    profile = tmp_path / "p.yaml"
    profile.write_text('target: {sim: {}}\nheaders: {"X-A": "one\\r\\ntwo"}\n')
    done = CliRunner().invoke(app, ["profile", "show", str(profile)])
    assert done.exit_code == 2
    assert "headers.X-A: a header may not contain a line break or NUL" in " ".join(done.output.split())


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"workload": {"prompt_tokens": 300_000_000}}, "workload.prompt_tokens: must be an integer <= 1,000,000"),
        ({"workload": {"output_tokens": {"mean": 10**7}}}, "workload.output_tokens.mean: must be an integer <= 1,000,000"),
        ({"load": {"levels": [100_000_000]}}, "load.levels[0]: must be an integer <= 100,000"),
        ({"load": {"mode": "open", "levels": [10**9]}}, "load.levels[0]: must be <= 100,000"),
        ({"load": {"levels": {"start": 1, "stop": 10**8}}}, "load.levels.stop: must be <= 100,000"),
        ({"load": {"max_in_flight": 10**6, "mode": "open"}}, "load.max_in_flight: must be an integer <= 100,000"),
        ({"workload": {"prompt_tokens": 10**5000}}, "workload.prompt_tokens: must be an integer <= 1,000,000, got an integer of about 5,001 digits"),
        ({"extra_body": {"when": __import__("datetime").date(2024, 1, 1)}}, "extra_body.when: must be a JSON value"),
        ({"extra_body": {"blob": b"hello"}}, "extra_body.blob: must be a JSON value"),
        ({"extra_body": {"tags": [{"x": {1, 2}}]}}, "extra_body.tags[0].x: must be a JSON value"),
    ],
)  # fmt: skip
def test_a_profile_holds_the_same_bounds_as_the_flags(profile: dict[str, object], message: str) -> None:
    # one set of bounds (loadgen.limits) wherever a value comes from: these once built 3 GB prompts or crashed
    with pytest.raises(ProfileError, match=re.escape(message)):
        parse_profile(profile, "p.yaml")


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ("100000000", "--levels: expected a finite number >= 1 and <= 100,000"),
        ("1e300", "<= 100,000"),
        ("inf", "finite"),
    ],
)
def test_sweep_levels_hold_the_profile_bounds(levels: str, message: str) -> None:
    result = runner.invoke(app, ["sweep", "--profile", "quickstart", "--levels", levels, "--url", "sim"])
    assert result.exit_code == 2 and message in result.output, result.output


def test_unreadable_yaml_numbers_and_nesting_are_one_line(tmp_path: Path) -> None:
    digits, deep = tmp_path / "digits.yaml", tmp_path / "deep.yaml"
    digits.write_text("workload: {prompt_tokens: " + "9" * 5000 + "}\n")
    deep.write_text("workload: " + "[" * 50_000 + "]" * 50_000 + "\n")
    for path, message in ((digits, "a number with thousands of digits"), (deep, "nested too deeply")):
        result = runner.invoke(app, ["profile", "show", str(path)])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


def test_a_trace_row_and_a_dataset_record_hold_the_token_bound(tmp_path: Path) -> None:
    trace, dataset = tmp_path / "t.csv", tmp_path / "d.jsonl"
    trace.write_text("time_s,prompt_tokens,output_tokens\n0,300000000,4\n1,4,4\n")
    result = runner.invoke(app, ["run", "--url", "sim", "--trace", str(trace), "-o", str(tmp_path / "r.json")])
    assert (
        result.exit_code == 2 and "t.csv:2: prompt_tokens: expected a whole number from 1 to 1,000,000" in result.output
    )
    for bad in ("1000000000000", "true", "1" + "0" * 400):
        dataset.write_text('{"prompt": "hi", "max_tokens": ' + bad + "}\n")
        args = [
            "run",
            "--url",
            "sim",
            "--concurrency",
            "1",
            "--dataset",
            str(dataset),
            "--requests",
            "1",
            "-o",
            str(tmp_path / "r.json"),
        ]
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "max_tokens must be an integer from 1 to 1,000,000" in result.output, (
            result.output
        )


@pytest.mark.parametrize(
    ("args", "key", "document", "message"),
    [
        # --rate had no maximum (1e9 requests/s for 10 s built a 112 GiB schedule and a MemoryError traceback)
        (["--rate", "1e9", "--duration", "10"], "--rate", {"load": {"mode": "open", "levels": [1e9]}}, "<= 100,000"),
        (["--turns", "5000"], "--turns", {"workload": {"turns": 5000}}, "<= 1,000"),
        (["--think-time", "1e6"], "--think-time", {"workload": {"think_time_s": 1e6}}, "<= 3,600"),
        (
            ["--max-in-flight", "1000000", "--rate", "2"],
            "--max-in-flight",
            {"load": {"max_in_flight": 1000000}},
            "<= 100,000",
        ),
    ],
)
def test_a_flag_and_the_profile_field_it_sets_are_held_to_one_bound(
    args: list[str], key: str, document: dict[str, object], message: str
) -> None:
    base = ["run", "--url", "sim", "--virtual-time", "--requests", "4", "--max-tokens", "2"]
    cli = runner.invoke(app, [*base, *([] if "--rate" in args else ["--concurrency", "2"]), *args])
    assert cli.exit_code == 2 and key in cli.stderr and message in cli.stderr, cli.output
    assert "Traceback" not in cli.output
    with pytest.raises(ProfileError) as refused_there:
        parse_profile({"schema_version": 1, "name": "b", "target": "sim", **document}, "b.yaml")
    assert message in str(refused_there.value), refused_there.value  # one spelling of the bound in both


SWEEP = Path(__file__).resolve().parents[1] / "data" / "results_v1_sweep.json"


@pytest.mark.parametrize(
    "plan",
    [["--law", "25+0.4b"], ["--variant", f"x={SWEEP},cost=1.1", "--variant", f"y={SWEEP},cost=3.9,gpus=2"]],
    ids=["what-if", "fleet"],
)
def test_a_qps_past_any_fleet_is_refused_as_a_traffic_row_is(plan: list[str]) -> None:
    """Issue 70, S17: ``--qps 1e300`` ended in an OverflowError traceback in the fleet plan."""
    refused(["plan", *plan, "--qps", "1e300", "--slo", "tpot_p95<50ms"], "--qps")
