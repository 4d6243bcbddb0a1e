"""``loadgen serve-sim`` and the root command, as a user runs them."""

from __future__ import annotations

import subprocess
import sys

import httpx
from typer.testing import CliRunner

from loadgen import __version__
from loadgen.cli import app

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"loadgen {__version__}"


def test_no_args_shows_help() -> None:
    result = runner.invoke(app, [])
    assert "serve-sim" in result.stdout


def test_serve_sim_refuses_non_loopback_without_flag() -> None:
    result = runner.invoke(app, ["serve-sim", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "--allow-remote" in result.stderr
    assert "Traceback" not in result.output


def test_serve_sim_rejects_bad_fault_spec() -> None:
    result = runner.invoke(app, ["serve-sim", "--fault", "explode=0.1"])
    assert result.exit_code == 2
    assert "--fault" in result.stderr


def test_serve_sim_serves_on_an_ephemeral_port() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "serve-sim", "--port", "0", "--model", "m1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert httpx.get(url + "/models", timeout=5).json()["data"][0]["id"] == "m1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
