"""``loadgen plan --variant`` and ``report --variant``: the fleet plan from results files and imported tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app

runner = CliRunner()
DATA = Path(__file__).parents[1] / "data"
SLOS = ["--slo", "tpot_p50<60ms", "--slo", "ttft_p95<2s", "--output-tokens", "128"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two variants from other tools' files: vLLM's benchmark and AIPerf, each imported by `loadgen import`."""
    folder = tmp_path_factory.mktemp("variants")
    out = {}
    for name, files in (
        ("vllm", sorted((DATA / "vllm_bench").glob("*.json"))),
        ("aiperf", sorted((DATA / "aiperf").glob("*.json"))),
    ):
        out[name] = folder / f"{name}.json"
        done = runner.invoke(app, ["import", *map(str, files), "-o", str(out[name])])
        assert done.exit_code == 0, done.output
    return out


def test_imported_variants_plan_a_constant_qps_as_plan_does_for_each(imported: dict[str, Path]) -> None:
    for qps in ("20",):
        fleet = json.loads(
            runner.invoke(
                app,
                ["plan", *(f"--variant={n}={p}" for n, p in imported.items()), "--qps", qps, *SLOS, "--json"],
            ).stdout
        )
        for name, path in imported.items():
            today = json.loads(runner.invoke(app, ["plan", str(path), "--qps", qps, *SLOS, "--json"]).stdout)
            ours = next(f for f in fleet["fleets"] if f["variants"] == [name])
            assert ours["replicas_paid"][name] == [today["replicas"]]
            assert next(v for v in fleet["variants"] if v["name"] == name)["batch"] == today["max_batch"]
        assert fleet["objective"] == "GPU-hours" and fleet["choice"] in imported
        replayed = fleet["fleets"][0]["replay"][0]  # each bucket's check names the SLO its value is for
        assert "ttft_p95_ms" in replayed and "tpot_p50_ms" not in replayed


def test_a_rate_series_with_prices_and_a_lag_reads_as_a_plan_and_a_report(
    imported: dict[str, Path], tmp_path: Path
) -> None:
    series = tmp_path / "day.csv"
    series.write_text("time_s,qps\n0,2\n60,6\n120,16\n180,16.5\n240,2\n", encoding="utf-8")
    args = [
        f"--variant=vllm={imported['vllm']},cost=2",
        f"--variant=aiperf={imported['aiperf']},cost=3,gpus=2",
        "--traffic",
        str(series),
        "--bucket",
        "1m",
        "--scale-up-s",
        "60",
        "--slo",
        "tpot_p50<60ms",
        "--output-tokens",
        "128",
    ]
    doc = json.loads(runner.invoke(app, ["plan", *args, "--json"]).stdout)
    assert doc["objective"] == "USD" and doc["demand"]["rates_rps"] == [2, 6, 16, 16.5, 2]
    chosen = doc["fleets"][0]
    assert doc["choice"] == chosen["variants"][0] == "vllm" and doc["runner_up"] == "aiperf"
    paid, need = chosen["replicas_paid"]["vllm"], chosen["replicas_serving"]["vllm"]
    assert paid == [max(need[k : k + 2]) for k in range(5)]  # one bucket of lag: the next bucket's in advance
    shown = runner.invoke(app, ["plan", *args])
    assert shown.exit_code == 0 and "Run vllm" in shown.stdout and "scale-up lag 60 s" in shown.stdout
    report = tmp_path / "fleet.md"
    done = runner.invoke(app, ["report", *args, "-o", str(report)])
    assert done.exit_code == 0, done.output
    text = report.read_text(encoding="utf-8")
    assert "## Fleet plan" in text and "## Replicas over time" in text and "| vllm | 1 | 2 |" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variant", "nameless"], "--variant 'nameless': expected NAME=RESULTS"),
        (["--variant", "a={vllm},cost=cheap", "--qps", "1"], "cost: expected a price from 0 to"),
        (["--variant", "a={vllm},cost=1e308", "--qps", "1"], "cost: expected a price from 0 to 1,000,000"),
        (["--variant", "a={vllm},cost=1,cost=2", "--qps", "1"], "cost is given twice"),
        (["--variant", "a={vllm},gpus=0", "--qps", "1"], "gpus: expected a whole number of GPUs from 1"),
        (["--variant", "a={vllm},colour=red", "--qps", "1"], "unknown option 'colour'"),
        (["--variant", "a={vllm}"], "give --traffic FILE or --qps"),
        (["--variant", "a={vllm}", "--variant", "a={aiperf}", "--qps", "1"], "the name 'a' is given twice"),
        (
            ["--variant", "a={vllm},cost=1", "--variant", "b={aiperf}", "--qps", "1"],
            "a cost for every variant or for none",
        ),
        (["{vllm}", "--mix"], "give each variant with --variant"),
        (["--variant", "a={vllm}", "--traffic", "{vllm}", "--bucket", "0s"], "--bucket '0s': expected a duration"),
    ],
)
def test_fleet_mistakes_are_one_line_errors(imported: dict[str, Path], args: list[str], message: str) -> None:
    filled = [a.format(**{k: str(v) for k, v in imported.items()}) for a in args]
    result = runner.invoke(app, ["plan", *filled, *SLOS])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_profiles_plan_variants_are_the_fleet(imported: dict[str, Path], tmp_path: Path) -> None:
    profile = tmp_path / "fleet.yaml"
    variants = ", ".join(f'"{n}={p},cost={c}"' for (n, p), c in zip(imported.items(), (2, 3)))
    profile.write_text(
        f"slo:\n  tpot_p50_ms: 60\nplan:\n  qps: 20\n  output_tokens: 128\n  variants: [{variants}]\n", encoding="utf-8"
    )
    doc = json.loads(runner.invoke(app, ["plan", "--profile", str(profile), "--json"]).stdout)
    assert [v["name"] for v in doc["variants"]] == list(imported) and doc["objective"] == "USD"
    profile.write_text("plan:\n  variants: [3]\n", encoding="utf-8")
    bad = runner.invoke(app, ["plan", "--profile", str(profile)])
    assert bad.exit_code == 2 and "plan.variants: expected a list of NAME=RESULTS" in bad.output


@pytest.mark.parametrize(
    ("rows", "bucket", "message"),
    [
        ("0,5\n60,1e308\n", "60s", "qps: expected a number from 0 to 1e+08"),
        ("0,5\n1e15,6\n", "60s", "time_s: expected a number from"),
        ("-1e9,5\n0,6\n", "60s", "is more than 100,000 buckets"),
        ("0,5\n10800,6\n", "0.0001s", "is more than 100,000 buckets"),
        ("0," + "5" * 140_000 + "\n", "60s", "not CSV this reader takes"),
    ],
)
def test_traffic_past_any_measurement_is_refused_before_it_is_allocated(
    imported: dict[str, Path], tmp_path: Path, rows: str, bucket: str, message: str
) -> None:
    """Issue 57 R2, R10: bucket bounds are checked before the buckets exist (a 0.1 ms bucket over 3 h once
    passed 3 GB), and a rate past any fleet's, a field past the CSV reader's limit, are one line."""
    traffic = tmp_path / "t.csv"
    traffic.write_text("time_s,qps\n" + rows)
    args = ["plan", "--variant", f"a={imported['vllm']}", "--traffic", str(traffic), "--bucket", bucket, *SLOS]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output
