"""Virtual time: the clock jumps between events, never past a socket's bytes or a thread's answer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load
from planner import PlanRequest, plan_from_results
from tests.virtual import in_virtual_time

runner = CliRunner()


def test_an_hour_of_sleep_is_an_hour_on_the_loops_clock_and_none_on_the_wall() -> None:
    async def sleepers() -> tuple[float, list[int]]:
        loop, order = asyncio.get_running_loop(), []

        async def sleeper(n: int, s: float) -> None:
            await asyncio.sleep(s)
            order.append(n)

        start = loop.time()
        await asyncio.gather(sleeper(1, 3600), sleeper(2, 0.5), sleeper(3, 60))
        return loop.time() - start, order

    wall = time.monotonic()
    elapsed, order = in_virtual_time(sleepers())
    assert elapsed == pytest.approx(3600, abs=1e-6) and order == [2, 3, 1]
    assert time.monotonic() - wall < 30  # no real hour; generous for a loaded machine


def test_bytes_on_a_socket_arrive_before_the_clock_moves() -> None:
    async def echo_under_a_timeout() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.readexactly(5))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        start = loop.time()
        async with asyncio.timeout(30):  # a pending timer the clock could jump to
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"hello")
            echoed = await reader.readexactly(5)
        writer.close()
        server.close()
        return echoed, loop.time() - start

    echoed, elapsed = in_virtual_time(echo_under_a_timeout())
    assert echoed == b"hello" and elapsed == 0.0


def _sleep_then_done() -> str:
    time.sleep(0.2)
    return "done"


def test_a_threads_answer_is_waited_for_in_real_time_not_jumped_over() -> None:
    async def slow_thread() -> str:
        async with asyncio.timeout(10):  # the clock would jump here if it did not wait for the thread
            return await asyncio.get_running_loop().run_in_executor(None, _sleep_then_done)

    assert in_virtual_time(slow_thread()) == "done"


def test_a_virtual_sweep_measures_the_simulators_law_exactly(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "target: {sim: {base_ms: 20, per_seq_ms: 0.5, max_num_seqs: 64}}\napi: completions\n"
        "workload: {output_tokens: 32, prompt_tokens: 8}\n"
        "load: {levels: [1, 8, 32], duration_s: 10, warmup_s: 2}\n"
    )
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "--quiet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "measured in virtual time" in result.stderr
    results = load(out)
    assert results.settings.virtual_time is True
    assert all(level.client_cpu_s is None and not level.client_bound for level in results.levels)
    fit = plan_from_results(results, PlanRequest()).fit
    assert fit is not None
    assert fit.base_ms == pytest.approx(20.0, rel=0.01) and fit.per_seq_ms == pytest.approx(0.5, rel=0.02)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://127.0.0.1:9/v1"], "--virtual-time runs the built-in simulator"),
        (["--url", "sim", "--workers", "2"], "--virtual-time runs in one process"),
    ],
)
def test_virtual_time_is_for_the_simulator_in_one_process(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(
        app, ["run", *args, "--concurrency", "2", "--requests", "4", "--virtual-time", "-o", str(tmp_path / "o.json")]
    )
    assert result.exit_code == 2 and message in result.stderr, result.output
