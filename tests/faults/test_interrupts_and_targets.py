"""Sweeps through faults, Ctrl-C inside a level, and targets that are not OpenAI servers."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ErrorKind
from loadgen.results import load

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_a_sweep_through_faults_counts_them_per_level(tmp_path: Path) -> None:
    profile = tmp_path / "faulty.yaml"
    profile.write_text(
        "target: {sim: {seed: 4, faults: {drop: 0.15, http_503: 0.15}}}\napi: completions\n"
        "workload: {output_tokens: 8, prompt_tokens: 8}\nload: {levels: [2, 8], duration_s: 2, warmup_s: 0.5}\n"
        "stop: {stop_on_saturation: false}\n"
    )
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "-o", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    results = load(out)
    assert results.complete and len(results.levels) == 2
    for level in results.levels:
        assert set(level.errors) <= {ErrorKind.STREAM_BROKEN, ErrorKind.HTTP_5XX} and level.failed > 0
        assert level.histograms  # still a valid level
    assert "%" in result.stdout  # the errors column shows the failures and the rate


def test_profile_fault_keys_are_validated() -> None:
    from loadgen.errors import ProfileError
    from loadgen.inputs.profile import parse_profile

    with pytest.raises(ProfileError, match=r"target.sim.faults.dorp: unknown key; did you mean 'drop'"):
        parse_profile({"target": {"sim": {"faults": {"dorp": 0.1}}}}, "p.yaml")
    with pytest.raises(ProfileError, match=r"target.sim.faults.drop: must be <= 1"):
        parse_profile({"target": {"sim": {"faults": {"drop": 3}}}}, "p.yaml")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_a_stop_signal_inside_a_level_leaves_a_valid_incomplete_file(tmp_path: Path, sig: signal.Signals) -> None:
    out, records = tmp_path / "r.json", tmp_path / "records.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "run", "--url", "sim", "--concurrency", "4", "--duration", "60",
         "--max-tokens", "8", "--records", str(records), "-o", str(out), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (records.exists() and records.read_text().count("\n") >= 2):  # requests have completed: under way
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert b"Traceback" not in err
    results = load(out)
    assert not results.complete and not results.levels[0].complete
    assert results.levels[0].completed > 0


class HtmlServer:
    """A server that answers every path with an HTML page: not an OpenAI endpoint."""

    def __enter__(self) -> str:
        ready = threading.Event()
        self.loop_holder: dict[str, object] = {}

        def serve() -> None:
            import asyncio

            async def html(request: web.Request) -> web.Response:
                return web.Response(text="<html>hi</html>", content_type="text/html")

            async def main() -> None:
                app_ = web.Application()
                app_.router.add_route("*", "/{tail:.*}", html)
                runner_ = web.AppRunner(app_, access_log=None)
                await runner_.setup()
                site = web.TCPSite(runner_, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                self.stop = asyncio.Event()
                ready.set()
                await self.stop.wait()
                await runner_.cleanup()

            self.loop = asyncio.new_event_loop()
            self.loop.run_until_complete(main())

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(10)
        return f"http://127.0.0.1:{self.port}/v1"

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)


@pytest.fixture
def html_url() -> Iterator[str]:
    with HtmlServer() as url:
        yield url


def test_a_non_openai_server_is_one_clear_line(html_url: str, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["run", "--url", html_url, "--concurrency", "1", "--requests", "1", "-o", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 3
    assert "not an OpenAI-compatible server" in result.stderr and "Traceback" not in result.output


def test_an_empty_results_file_cannot_be_planned_or_gated(tmp_path: Path) -> None:
    import json

    doc = json.loads((ROOT / "tests/data/results_v1.json").read_text())
    doc["levels"] = []
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(doc))
    plan = runner.invoke(app, ["plan", str(path)])
    assert plan.exit_code == 2 and "no levels" in plan.stderr
    assert runner.invoke(app, ["gate", str(path), "--require", "tpot_p95 < 1s"]).exit_code == 3


@pytest.mark.slow
def test_a_server_killed_mid_sweep_fails_the_run_within_seconds_and_keeps_the_levels_before(tmp_path: Path) -> None:
    """Issue 57 R3: a dead server spun its level to the 300 s window cap on connect errors and exited 0."""
    server = subprocess.Popen([sys.executable, "-m", "loadgen", "serve-sim", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        profile = tmp_path / "p.yaml"
        profile.write_text("target: {url: '" + url + "'}\napi: completions\nworkload: {output_tokens: 8}\n"
                           "load: {levels: [2, 4, 8], duration_s: 4, warmup_s: 0.5}\n"
                           "stop: {stop_on_saturation: false}\n")  # fmt: skip
        out = tmp_path / "s.json"
        sweep = subprocess.Popen([sys.executable, "-m", "loadgen", "sweep", "--profile", str(profile), "-o", str(out)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)  # fmt: skip
        deadline = time.monotonic() + 120
        while not (out.exists() and load(out).levels):  # the first level is saved: kill the server in the second
            assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
            time.sleep(0.05)
        time.sleep(1.0)
        server.kill()
        killed = time.monotonic()
        _, err = sweep.communicate(timeout=90)
        took = time.monotonic() - killed
    finally:
        server.kill()
        server.wait(timeout=10)
    assert sweep.returncode == 3 and took < 60, (took, err)
    print(f"the sweep exited {took:.1f} s after the server was killed")
    assert "Traceback" not in err
    results = load(out)
    first, second = results.levels[:2]
    assert first.complete and not first.target_gone and first.completed > 0
    assert second.target_gone and not second.complete and len(results.levels) == 2
    assert not results.complete
    assert "the server stopped answering" in " ".join(err.split())
