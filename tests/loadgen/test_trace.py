"""Trace replay: recorded arrivals and lengths, sent at their times (scaled), each with its own lengths."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ProfileError, UsageError
from loadgen.inputs.profile import parse_profile
from loadgen.inputs.trace import Trace, load_trace
from loadgen.results import load
from loadgen.sim.server import SimProcess

runner = CliRunner()
# (offset s, prompt tokens, output tokens): bursts and gaps, as production traffic has
REQUESTS = [(0.0, 30, 4), (0.05, 80, 6), (0.06, 20, 3), (0.40, 50, 5), (0.41, 60, 8), (0.90, 10, 2),
            (1.00, 40, 4), (1.30, 70, 7), (1.31, 25, 3), (1.60, 35, 5)]  # fmt: skip


def mooncake(path: Path) -> Path:
    lines = [{"timestamp": 1_700_000_000_000 + round(t * 1000), "input_length": p, "output_length": o,
              "hash_ids": [1, 2, 3]} for t, p, o in REQUESTS]  # fmt: skip
    path.write_text("\n".join(json.dumps(line) for line in reversed(lines)))  # unsorted on purpose
    return path


def test_the_three_formats_read_to_the_same_schedule(tmp_path: Path) -> None:
    ours = tmp_path / "t.csv"
    ours.write_text("time_s,prompt_tokens,output_tokens\n" + "".join(f"{t + 100},{p},{o}\n" for t, p, o in REQUESTS))
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:15:{46 + t:010.7f},{p},{o}\n" for t, p, o in REQUESTS)
    )
    for path, fmt in ((ours, "loadgen"), (mooncake(tmp_path / "m.jsonl"), "mooncake"), (azure, "azure")):
        trace = load_trace(path)
        assert trace.format == fmt
        assert trace.offsets_s == pytest.approx([t for t, _, _ in REQUESTS], abs=1e-6)
        assert trace.prompt_tokens == tuple(p for _, p, _ in REQUESTS)
        assert trace.output_tokens == tuple(o for _, _, o in REQUESTS)
    assert load_trace(ours).scaled(0.5, 4).offsets_s == pytest.approx([0, 0.025, 0.03, 0.2])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"when": 1, "input_length": 3, "output_length": 2}', "unknown columns"),
        ('{"timestamp": "soon", "input_length": 3, "output_length": 2}', ":1: timestamp: expected a number"),
        ('{"timestamp": 1, "input_length": 0, "output_length": 2}', ":1: input_length: expected a whole number"),
        ("not json", r":1 \(JSON lines, or a .csv file\): not valid JSON"),
    ],
)
def test_a_bad_trace_is_one_line_naming_file_line_and_column(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        load_trace(path)


@pytest.mark.slow  # it times real sends over real sockets: beside other workers a busy core delays them
def test_a_replay_sends_at_the_recorded_times_with_the_recorded_lengths(tmp_path: Path) -> None:
    # The simulator counts a word a token: usage shows exactly the lengths each request was given.
    out, records = tmp_path / "r.json", tmp_path / "rec.jsonl"
    with SimProcess() as sim:
        result = runner.invoke(app, ["run", "--url", sim.base_url, "--api", "completions", "--trace",
                                     str(mooncake(tmp_path / "m.jsonl")), "--time-scale", "2", "--records",
                                     str(records), "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "trace replay: 10 requests scheduled over 3.2 s (mooncake format, time scale 2)" in result.stderr
    results = load(out)
    level = results.levels[0]
    assert (
        results.settings.trace is not None
        and results.settings.trace["format"] == "mooncake"
        and level.load.arrival == "trace"
    )
    assert level.completed == 10 and level.output_tokens == sum(o for _, _, o in REQUESTS)
    rows = sorted((json.loads(line) for line in records.read_text().splitlines()), key=lambda r: r["t_intended"])
    t0 = rows[0]["t_intended"]
    assert [r["t_intended"] - t0 for r in rows] == pytest.approx([2 * t for t, _, _ in REQUESTS], abs=1e-6)
    # achieved against scheduled: each send within a few ms of its time (the lag histogram says the same)
    assert max(r["t_sent"] - r["t_intended"] for r in rows) < 0.05
    assert sorted(r["output_tokens"] for r in rows) == sorted(o for _, _, o in REQUESTS)
    assert sorted(r["prompt_tokens"] for r in rows) == sorted(p for _, p, _ in REQUESTS)


def test_a_trace_refuses_flags_that_contradict_it(tmp_path: Path) -> None:
    trace = str(mooncake(tmp_path / "m.jsonl"))
    for extra, flag in (
        (["--rate", "3"], "--rate"),
        (["--duration", "5"], "--duration"),
        (["--workers", "2"], "--workers"),
    ):
        result = runner.invoke(app, ["run", "--url", "sim", "--trace", trace, *extra, "-o", str(tmp_path / "o.json")])
        assert result.exit_code == 2 and flag in result.stderr, result.output


def test_a_missing_or_binary_trace_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--trace .*nope.jsonl: no such file"):
        load_trace(tmp_path / "nope.jsonl")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(UsageError, match=r"--trace .*b.jsonl: not UTF-8 text"):
        load_trace(binary)


def test_a_trace_profile_sweeps_its_time_scales(tmp_path: Path) -> None:
    trace = mooncake(tmp_path / "m.jsonl")
    profile = tmp_path / "replay.yaml"
    profile.write_text(f"load: {{mode: trace, trace: {trace}, levels: [2, 1], requests: 5, warmup_s: 0}}\n"
                       "stop: {stop_on_saturation: false}\n")  # fmt: skip
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--quiet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    results = load(out)
    slow, fast = results.levels
    assert slow.completed == fast.completed == 5
    assert slow.output_tokens == fast.output_tokens == sum(o for _, _, o in REQUESTS[:5])
    # each level is labelled with its mean rate: half the time scale, twice the rate
    assert (slow.load.arrival, fast.load.arrival) == ("trace", "trace")
    assert fast.load.value == pytest.approx(2 * slow.load.value, rel=1e-3)
    # every request names block 1 first: all but the first request's prompt is a prefix of it (30 of 240 tokens)
    assert results.settings.trace == {"file": "m.jsonl", "format": "mooncake", "requests": 5, "span_s": 0.41,
                                      "block_tokens": 512, "implied_prefix_share": 0.875}  # fmt: skip


@pytest.mark.parametrize(
    ("load", "workload", "message"),
    [
        ("{mode: trace}", "{}", "load.mode: mode trace replays load.trace"),
        ("{mode: trace, trace: TRACE, duration_s: 5}", "{}", "load.duration_s: the trace sets"),
        ("{mode: open, trace: TRACE}", "{}", "load.trace: a trace is replayed in mode trace, not open"),
        ("{mode: trace, trace: TRACE}", "{output_tokens: 5}", "workload.output_tokens: load.mode trace takes"),
        ("{mode: trace, trace: nope.jsonl}", "{}", "load.trace: no such file: nope.jsonl"),
        ("{mode: open, ramp_up_s: 2}", "{}", "load.ramp_up_s: a ramp-up staggers closed-loop clients"),
    ],
)
def test_a_trace_profile_refuses_what_contradicts_the_trace(
    tmp_path: Path, load: str, workload: str, message: str
) -> None:
    trace = mooncake(tmp_path / "m.jsonl")
    doc = yaml.safe_load(f"load: {load.replace('TRACE', str(trace))}\nworkload: {workload}\n")
    with pytest.raises(ProfileError, match=message):
        parse_profile(doc, "p.yaml")


@settings(max_examples=40)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from([0.0, 0.5, 1.25, 3.0, 1e6]), st.integers(1, 5000), st.integers(1, 5000)),
        min_size=1,
        max_size=30,
    ),
    limit=st.one_of(st.none(), st.integers(1, 40)),
    spoil=st.sampled_from(["", "1_0", "0", "2.5", "nan", " 7 "]),
)
def test_numpys_csv_reader_and_the_row_reader_accept_and_read_the_same(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[float, int, int]], limit: int | None, spoil: str
) -> None:
    # a CSV is parsed by numpy when clean and row by row otherwise; JSON lines always row by row. A spoiled
    # prompt length in the first row (one float() reads and numpy does not, or one out of range) must read
    # or fail alike on both paths.
    folder = tmp_path_factory.mktemp("trace")
    prompts: list[object] = [p for _, p, _ in rows]
    if spoil:
        prompts[0] = spoil
    csv_path, json_path = folder / "t.csv", folder / "t.jsonl"
    csv_path.write_text("time_s,prompt_tokens,output_tokens\n" + "".join(
        f"{t},{p},{o}\n" for (t, _, o), p in zip(rows, prompts)))  # fmt: skip
    json_path.write_text("".join(json.dumps({"time_s": t, "prompt_tokens": p, "output_tokens": o}) + "\n"
                                 for (t, _, o), p in zip(rows, prompts)))  # fmt: skip
    outcomes: list[Trace | str] = []
    for path in (csv_path, json_path):
        try:
            outcomes.append(load_trace(path, limit))
        except UsageError as exc:
            outcomes.append(re.sub(r":\d+:", ":LINE:", str(exc).replace(str(path), "FILE")))  # CSV has a header
    if spoil in ("", " 7 ", "1_0"):  # float() reads these (JSON holds them as strings)
        assert all(isinstance(o, Trace) for o in outcomes), outcomes
    assert outcomes[0] == outcomes[1]
