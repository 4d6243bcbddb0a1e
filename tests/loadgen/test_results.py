"""The results file: round trips, summary keys, versions, corrupt input, worker merges."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.choices import Arrival
from loadgen.errors import ErrorKind, ResultsError, SchemaVersionError
from loadgen.histogram import DEFAULT_CONFIG, LatencyHistogram
from loadgen.level.result import LevelResult
from loadgen.load import Load
from loadgen.quantity import Metric
from loadgen.results import SCHEMA_VERSION, Results, RunInfo, Target, load, save_atomic
from loadgen.run.merge import merge_levels
from loadgen.run_settings import RunSettings
from planner.reports.report import caveats

DATA = Path(__file__).resolve().parents[1] / "data"

SUMMARY_KEYS = {
    "ttft_ms",
    "ttft_sent_ms",
    "ttfo_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "queue_ms",
    "lag_ms",
    "output_tokens_per_s",
    "requests_per_s",
    "offered_per_s",
    "achieved_concurrency",
    "completed",
    "failed",
    "cut",
    "errors",
    "prompt_tokens_mean",
    "output_tokens_mean",
    "tokens_estimated",
    "client_bound",
    "client",
    "load",
}
STAT_KEYS = {"mean", "p50", "p90", "p95", "p99", "max", "count"}


C4 = Load(kind="concurrency", value=4)


def level(
    values: dict[Metric, list[int]],
    *,
    completed: int = 3,
    errors: dict[ErrorKind, int] | None = None,
    load: Load = C4,
) -> LevelResult:
    hists = {m: LatencyHistogram() for m in Metric}
    for m, vs in values.items():
        for v in vs:
            hists[m].record_us(v)
    return LevelResult(
        load=load,
        window_s=10.0,
        completed=completed,
        errors=errors or {},
        output_tokens=100 * completed,
        window_output_tokens=90.0 * completed,
        prompt_tokens=20 * completed,
        prompt_tokens_reported=completed,
        tokens_estimated=False,
        achieved_concurrency=3.9,
        histograms=hists,
    )


def results(levels: tuple[LevelResult, ...]) -> Results:
    return Results(
        run=RunInfo(
            id="abc",
            started_at="2026-11-29T12:00:00Z",
            tool_version="0.1.0",
            python="3.11.7",
            platform="Linux",
            cpu_count=2,
            command="run",
        ),
        target=Target("http://127.0.0.1:8000/v1/", "m", "chat"),
        settings=RunSettings(api="chat"),
        levels=levels,
        complete=True,
    )


metric_values = st.dictionaries(st.sampled_from(list(Metric)), st.lists(st.integers(1, 10**8), max_size=20))


@given(metric_values, st.integers(0, 50), st.dictionaries(st.sampled_from(list(ErrorKind)), st.integers(1, 9)))
def test_round_trip(values: dict[Metric, list[int]], completed: int, errors: dict[ErrorKind, int]) -> None:
    original = results(
        (
            level(values, completed=completed, errors=errors),
            level({}, load=Load(kind="rate", value=2.5, arrival=Arrival.GAMMA, burstiness=0.5, max_in_flight=8)),
        )
    )
    assert Results.from_json(original.to_json()) == original


def test_summary_keys_are_exactly_the_documented_ones() -> None:
    summary = level({Metric.TTFT: [1000, 2000]}).summary()
    assert set(summary) == SUMMARY_KEYS
    for key in SUMMARY_KEYS:
        if key.endswith("_ms"):
            assert set(summary[key]) == STAT_KEYS
    assert summary["ttft_ms"]["count"] == 2 and summary["tpot_ms"]["p50"] is None
    assert summary["load"] == {"kind": "concurrency", "value": 4}
    assert summary["output_tokens_per_s"] == 27.0  # 90 tokens in window * 3 / 10 s


def test_client_bound_follows_p99_lag() -> None:
    assert not level({Metric.LAG: [500] * 100}).client_bound
    assert level({Metric.LAG: [500] * 90 + [50_000] * 10}).client_bound


def test_client_bound_sees_another_process_holding_the_core() -> None:
    quiet = replace(level({Metric.LAG: [500] * 100}), client_cpu_s=2.0)  # 20% of its 10 s window running
    assert replace(quiet, runqueue_wait_s=2.0).client_bound is False  # one competitor: half a core, as fair
    assert replace(quiet, runqueue_wait_s=0.3, client_cpu_s=0.1).client_bound is False  # a few late wake-ups
    noisy = replace(quiet, runqueue_wait_s=6.0)  # ready to run 8 s, waited 6 s of it
    assert noisy.client_bound and noisy.client_bound_causes == (
        "its core taken by another process: it waited 75% of the time it was ready to run",
    )
    assert LevelResult.from_json(noisy.to_json(), DEFAULT_CONFIG).runqueue_wait_s == pytest.approx(
        noisy.runqueue_wait_s
    )


def test_client_bound_sees_a_generator_that_wanted_its_whole_core_and_got_half() -> None:
    # one competitor takes half the core (a fair share, not flagged by the wait ratio); a generator that
    # needed 80% of it was ready to run nearly the whole window: behind all along (measured: c=256 beside
    # one CPU hog, TTFT p99 +75 ms against +7 ms quiet, its wait ratio 50%)
    starved = replace(level({Metric.LAG: [500] * 100}), client_cpu_s=4.9, runqueue_wait_s=4.8)
    assert starved.client_bound_causes == (
        "generator ready to run 97% of the window (it ran 49%, and waited 48% for a core another process held)",
    )
    light = replace(starved, client_cpu_s=2.6, runqueue_wait_s=2.5)  # c=64 beside the same hog: half a core spare
    assert not light.client_bound
    busy = replace(starved, client_cpu_s=9.5, runqueue_wait_s=0.2)  # its own CPU: that cause, said once
    assert busy.client_bound_causes == ("generator CPU 95% busy",)


def test_a_level_whose_client_shared_its_core_is_trusted_and_its_tail_called_an_upper_bound() -> None:
    # c=256 beside one hog, the compiled reader: it ran 46% and waited 43% (ready 88%, under the 90% rule);
    # TTFT p99 read +19.8 ms against +2-5 quiet, the median within 1 ms
    shared = replace(level({Metric.LAG: [500] * 100}), client_cpu_s=4.6, runqueue_wait_s=4.3, loop_lag_p99_ms=15.0)
    assert not shared.client_bound
    (note,) = [n for n in caveats(results((shared,))) if "ran timers" in n]
    assert "shared its core (it waited 48% of the time it was ready to run" in note and "upper bounds" in note
    quiet = replace(shared, runqueue_wait_s=0.2)  # late timers of its own: no neighbour named
    (note,) = [n for n in caveats(results((quiet,))) if "ran timers" in n]
    assert "shared its core" not in note


def test_merge_of_worker_parts_equals_recording_the_union() -> None:
    a = level({Metric.TTFT: [1000, 5000], Metric.ITL: [30]}, errors={ErrorKind.TIMEOUT: 1})
    b = level({Metric.TTFT: [7000], Metric.ITL: [31, 32]}, completed=2, errors={ErrorKind.TIMEOUT: 2})
    merged = merge_levels([a, b])
    union = level({Metric.TTFT: [1000, 5000, 7000], Metric.ITL: [30, 31, 32]})
    assert merged.histograms == union.histograms
    assert merged.completed == 5 and merged.errors == {ErrorKind.TIMEOUT: 3}
    assert merged.achieved_concurrency == pytest.approx(7.8) and merged.workers == 2


def test_one_saturated_worker_marks_the_merged_level() -> None:
    busy = replace(level({Metric.TTFT: [1000]}), client_cpu_s=9.8)  # 98% of its 10 s window
    idle = replace(level({Metric.TTFT: [1000]}), client_cpu_s=2.0)
    merged = merge_levels([idle, busy])
    assert merged.client_cpu_utilization == pytest.approx(0.59)  # the average alone would pass
    assert merged.client_bound and merged.client_bound_causes == ("worker 1: generator CPU 98% busy",)
    assert LevelResult.from_json(merged.to_json(), DEFAULT_CONFIG).bound_workers == merged.bound_workers


def test_save_atomic_then_load(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    original = results((level({Metric.TPOT: [30_000]}),))
    save_atomic(original, path)
    assert load(path) == original
    assert not list(tmp_path.glob("*.tmp"))


def test_every_versioned_fixture_loads() -> None:
    fixtures = sorted(DATA.glob("results_v*.json"))
    assert fixtures
    for path in fixtures:
        loaded = load(path)
        assert loaded.levels


def test_newer_schema_is_rejected(tmp_path: Path) -> None:
    doc = json.loads(results(()).to_json())
    doc["schema_version"] = SCHEMA_VERSION + 1
    path = tmp_path / "new.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaVersionError, match="upgrade loadgen"):
        load(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{", "not valid JSON"),
        ("[]", "not a loadgen results file"),
        ('{"schema": "loadgen.results", "schema_version": 1}', "corrupt results file"),
    ],
)
def test_corrupt_files_get_one_clear_error(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ResultsError, match=match):
        load(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no such results file"):
        load(tmp_path / "nope.json")


def test_per_turn_histograms_round_trip_and_merge_across_workers() -> None:
    def turns(ttft_us: dict[int, list[int]]) -> dict[int, dict[Metric, LatencyHistogram]]:
        out = {}
        for t, values in ttft_us.items():
            hists = {m: LatencyHistogram() for m in (Metric.TTFT, Metric.TPOT, Metric.E2E)}
            for v in values:
                hists[Metric.TTFT].record_us(v)
            out[t] = hists
        return out

    a = replace(level({Metric.TTFT: [1000]}), by_turn=turns({1: [1000], 2: [3000]}))
    b = replace(level({Metric.TTFT: [2000]}), by_turn=turns({1: [2000]}))
    merged = merge_levels([a, b])
    assert merged.by_turn is not None and sorted(merged.by_turn) == [1, 2]
    assert merged.by_turn[1][Metric.TTFT].count == 2 and merged.by_turn[2][Metric.TTFT].count == 1
    back = LevelResult.from_json(merged.to_json(), DEFAULT_CONFIG)
    assert back.by_turn is not None and back.by_turn[1][Metric.TTFT] == merged.by_turn[1][Metric.TTFT]
    assert back.summary()["by_turn"]["2"]["ttft_ms"]["p50"] == pytest.approx(3.0, rel=0.01)


def test_stored_settings_are_typed_with_the_defaults_older_files_imply() -> None:
    # a file written before metric_convention, start and retries existed, with a key no reader knows
    old = RunSettings.from_json({"api": "chat", "prompt_tokens": {"mean": 64}, "transport": "native", "levels": []})
    assert (old.metric_convention, old.start, old.retries) == ("text", "staggered", 0)
    assert old.prompt_mean == 64.0 and old.output_mean is None
    assert old.to_json()["transport"] == "native" and RunSettings.from_json(old.to_json()) == old
    with pytest.raises(TypeError, match=r"settings\.profile"):
        RunSettings.from_json({"profile": "quickstart"})
    with pytest.raises(ValueError, match=r"settings\.retries"):
        RunSettings.from_json({"retries": -1})


def test_a_results_file_with_two_levels_at_one_load_is_refused_by_name(tmp_path: Path) -> None:
    """Issue 57 R7: report listed c=4 twice and plan fitted both."""
    doc = json.loads((DATA / "results_v1_sweep.json").read_text())
    doc["levels"].append(doc["levels"][0])
    path = tmp_path / "twice.json"
    path.write_text(json.dumps(doc))
    label = load(DATA / "results_v1_sweep.json").levels[0].load.label
    with pytest.raises(ResultsError, match=f"two levels at {label}: a results file holds one level per load"):
        load(path)
