"""``loadgen serve-sim`` and the root command, as a user runs them."""

from __future__ import annotations

import socket
import struct
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


def test_clients_that_leave_mid_request_leave_no_traceback_in_the_log() -> None:
    # Half a request body then a close, or a reset (SO_LINGER 0), before or during the stream.
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "serve-sim", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        host, port = proc.stdout.readline().strip().removeprefix("http://").removesuffix("/v1").split(":")
        body = (
            b'{"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": true}'
        )
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        request = head + b"content-length: %d\r\n\r\n%s" % (len(body), body)
        for cut, reset in [(len(request) // 2, False), (len(request) // 2, True), (len(request), True)]:
            with socket.create_connection((host, int(port))) as s:
                s.sendall(request[:cut])
                if cut == len(request):
                    s.recv(1)  # the stream has started
                if reset:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # the server is still healthy: a full request is answered
        assert httpx.get(f"http://{host}:{port}/health", timeout=5).status_code == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err and "Error handling request" not in err, err
