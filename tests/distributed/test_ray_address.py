"""``--ray`` aimed where nothing listens fails in seconds with one line, before any request is sent."""

from __future__ import annotations

import socket
import time
from importlib.util import find_spec

import pytest
from typer.testing import CliRunner

from loadgen.cli import app

# found, not imported: every xdist worker collects this file, and importing ray takes ~0.5 s
pytestmark = pytest.mark.skipif(find_spec("ray") is None, reason="ray is not installed (pip install '.[ray]')")
runner = CliRunner()


def _free_port() -> int:
    with socket.socket() as sock:  # bound then closed: nothing listens there afterwards
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("form", ["{}", "ray://{}"])
def test_a_cluster_address_with_nothing_listening_fails_fast(form: str) -> None:
    address = form.format(f"127.0.0.1:{_free_port()}")
    t0 = time.monotonic()
    result = runner.invoke(
        app, ["run", "--url", "http://127.0.0.1:9/v1", "--concurrency", "2", "--duration", "1", "--ray", address]
    )
    assert result.exit_code == 3, result.output
    assert f"--ray {address}: nothing answers at" in result.output and "Traceback" not in result.output
    assert time.monotonic() - t0 < 30  # ray.init alone retried for minutes


def test_a_malformed_cluster_address_is_a_usage_error() -> None:
    result = runner.invoke(
        app, ["run", "--url", "http://127.0.0.1:9/v1", "--concurrency", "2", "--duration", "1", "--ray", "nohost"]
    )
    assert result.exit_code == 2, result.output
    assert "--ray nohost: expected local, auto, HOST:PORT or ray://HOST:PORT" in result.output
