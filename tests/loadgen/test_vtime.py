"""Virtual time: the clock jumps between events, never past a socket's bytes or a thread's answer."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load
from loadgen.run.vtime import in_flight, tcp_bytes
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


def test_bytes_one_end_sent_and_the_other_has_not_received_hold_the_clock() -> None:
    """A busy kernel may defer a loopback delivery to its softirq thread: the sender's counter has the bytes,
    the receiver's not yet. The clock must not jump then (a stream's next chunk would be read a timeout late)."""
    a, b = ("127.0.0.1", 5000), ("127.0.0.1", 6000)
    assert not in_flight([((a, b), (1000, 77)), ((b, a), (77, 1000))])  # every byte arrived, read or not
    assert in_flight([((a, b), (1200, 77)), ((b, a), (77, 1000))])  # 200 bytes still on their way to b
    assert in_flight([((a, b), (1000, 77)), ((b, a), (90, 1000))])  # and the other way
    assert not in_flight([((a, b), (1200, 77))])  # the other end is not this loop's: not ours to wait for


def test_a_connections_two_ends_count_the_same_bytes() -> None:
    """The TCP counters the check reads (``TCP_INFO``), at both ends of a real loopback connection."""
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as a:
        b, _ = server.accept()
        with b:
            a.sendall(b"x" * 1000)
            b.sendall(b"y" * 77)
            assert b.recv(1000, socket.MSG_PEEK) and a.recv(77, socket.MSG_PEEK)  # both delivered
            ends = [tcp_bytes(a), tcp_bytes(b)]
            assert ends[0] is not None and ends[1] is not None
            assert ends[0][1] == (1000, 77) and ends[1][1] == (77, 1000)
            assert not in_flight(e for e in ends if e is not None)
            assert tcp_bytes(server) is None  # listening: no peer


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
