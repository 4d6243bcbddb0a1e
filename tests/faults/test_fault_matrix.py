"""The fault matrix: every injected fault ends as a named, counted outcome and a valid results file.

Over real loopback sockets, each transport, with the simulator in the generator's loop in virtual
time (``tests/virtual.py``): a hang reaches its timeout at once, and a stall is exactly its length.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.api import Api
from loadgen.choices import Transport
from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.errors import ErrorKind
from loadgen.lengths import Lengths
from loadgen.level.result import LevelResult
from loadgen.load import LevelPlan, Load
from loadgen.quantity import Metric
from loadgen.results import Results, RunInfo, Target, load, save_atomic
from loadgen.run.requests import Workload
from loadgen.run.runner import run_level
from loadgen.run_settings import RunSettings
from loadgen.sim.faults import FaultConfig
from loadgen.sim.openai_app import SimOptions
from loadgen.sim.server import SimProcess
from loadgen.wire.client import HttpOptions, make_http_client
from tests.virtual import in_virtual_time, serving

REQUESTS = 16
TIMEOUT_S = 2.0


def level_with(faults: FaultConfig, transport: str = "native", api: Api = Api.CHAT, **sim: float) -> LevelResult:
    """One level against the faulty simulator, both in one loop in virtual time (timeouts cost nothing)."""
    options = SimOptions(faults=faults, engine=EngineConfig(seed=5), **sim)  # type: ignore[arg-type]
    workload = Workload(api=api, model="sim-model", prompt_tokens=Lengths(8), output_tokens=Lengths(8))
    wire = HttpOptions(timeout_s=TIMEOUT_S, transport=transport)  # type: ignore[arg-type]
    plan = LevelPlan(load=Load(kind="concurrency", value=4), requests=REQUESTS, timeout_s=TIMEOUT_S)

    async def level() -> LevelResult:
        async with serving(options) as base_url, make_http_client(base_url, {}, wire) as http:
            # bounded: a fault must never hang the generator past its timeouts
            clock = asyncio.get_running_loop().time
            return await asyncio.wait_for(run_level(plan, workload, http, clock=clock, real_time=False), timeout=60)

    return in_virtual_time(level())


def assert_valid_file(level: LevelResult, tmp_path: Path) -> None:
    results = Results(
        run=RunInfo(
            id="x",
            started_at="2026-11-29T00:00:00Z",
            tool_version="0.1.0",
            python="3.11",
            platform="linux",
            cpu_count=2,
            command="run",
        ),
        target=Target("http://127.0.0.1/v1/", "sim-model", "chat"),
        settings=RunSettings(),
        levels=(level,),
        complete=True,
    )
    path = tmp_path / "r.json"
    save_atomic(results, path)
    assert load(path).levels[0].errors == level.errors


@pytest.mark.parametrize("api", [Api.CHAT, Api.RESPONSES])  # issue 58: the Responses API's typed events too
@pytest.mark.parametrize("transport", tuple(Transport))
@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("http_429", ErrorKind.HTTP_429),
        ("http_500", ErrorKind.HTTP_5XX),
        ("http_503", ErrorKind.HTTP_5XX),
        ("drop", ErrorKind.STREAM_BROKEN),
        ("malformed", ErrorKind.MALFORMED_CHUNK),
        ("reset", ErrorKind.CONNECT),
        ("hang", ErrorKind.TIMEOUT),
    ],
)
def test_failure_is_counted_under_its_own_kind(
    fault: str, kind: ErrorKind, transport: str, api: Api, tmp_path: Path
) -> None:
    level = level_with(FaultConfig(**{fault: 0.5}), transport, api)
    assert set(level.errors) == {kind}
    assert level.completed + level.failed == REQUESTS  # in the denominator, none lost
    assert 0 < level.failed < REQUESTS
    assert level.histograms[Metric.E2E].count == level.completed  # failures stay out of latencies
    assert level.histograms[Metric.TTFT].count == level.completed
    assert_valid_file(level, tmp_path)


def test_a_stall_is_latency_not_an_error() -> None:
    level = level_with(FaultConfig(stall=0.5), stall_ms=600.0)
    assert level.failed == 0 and level.completed == REQUESTS
    assert level.histograms[Metric.ITL].max_us() >= 600_000  # type: ignore[operator]


@pytest.mark.parametrize("api", [Api.CHAT, Api.RESPONSES])
@pytest.mark.parametrize("fault", ["trickle", "oversized"])
def test_awkward_but_valid_streams_are_read_in_full(fault: str, api: Api) -> None:
    level = level_with(FaultConfig(**{fault: 0.5}), api=api)
    assert level.failed == 0 and level.completed == REQUESTS
    assert level.output_tokens == 8 * REQUESTS and not level.tokens_estimated


def test_failures_are_visible_in_table_summary_report_and_gate(tmp_path: Path) -> None:
    runner = CliRunner()
    with SimProcess(SimOptions(faults=FaultConfig(http_500=0.3), engine=EngineConfig(seed=2))) as server:
        out = tmp_path / "r.json"
        result = runner.invoke(
            app,
            [
                "run",
                "--url",
                server.base_url,
                "--concurrency",
                "4",
                "--requests",
                "30",
                "--max-tokens",
                "8",
                "-o",
                str(out),
                "--quiet",
            ],
        )
        assert result.exit_code == 0, result.output
    assert "http_5xx=" in result.stdout  # the terminal table
    summary = load(out).levels[0].summary()
    assert summary["failed"] > 0 and summary["errors"]["http_5xx"] == summary["failed"]
    report = tmp_path / "r.md"
    assert runner.invoke(app, ["report", str(out), "-o", str(report)]).exit_code == 0
    assert "failed requests (http_5xx" in report.read_text()
    gate = runner.invoke(app, ["gate", str(out), "--require", "error_rate < 1%", "--json"])
    assert gate.exit_code in (1, 3)
    assert json.loads(gate.stdout)["status"] != "pass"
