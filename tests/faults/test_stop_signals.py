"""Stop signals however they come: through a ``timeout`` wrapper, repeated, early, or SIGKILL.

A CI job cancelled, systemd stopping a unit or ``timeout`` expiring sends TERM
to the whole process group, often more than once. What was measured must be
saved within a bounded time, and the simulator child must never outlive the
run with its port open.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from loadgen.results import load

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LOADGEN = [sys.executable, "-m", "loadgen"]
RUN = ["run", "--url", "sim", "--concurrency", "4", "--duration", "60", "--max-tokens", "8", "--quiet"]


def _under_way(proc: subprocess.Popen[bytes], records: Path) -> None:
    """Wait until requests have completed (the level is measuring), not for a fixed time."""
    deadline = time.monotonic() + 120
    while not (records.exists() and records.read_text().count("\n") >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)


def _port_closed(base_url: str, within_s: float = 15.0) -> bool:
    """True once nothing listens at the URL's port (the simulator is gone)."""
    parts = urlsplit(base_url)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=1):
                pass
        except OSError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils timeout")
def test_a_timeout_wrapper_signalled_mid_run_leaves_a_valid_file_and_no_simulator(tmp_path: Path) -> None:
    # `timeout` forwards TERM to loadgen and then to its whole process group, the simulator child too:
    # loadgen must still save what it measured (exit 3), and no simulator may be left serving.
    out, records = tmp_path / "r.json", tmp_path / "records.jsonl"
    proc = subprocess.Popen(
        ["timeout", "90", *LOADGEN, *RUN, "--records", str(records), "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    _under_way(proc, records)
    proc.send_signal(signal.SIGTERM)  # to `timeout`, as a CI runner cancelling the job would
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert b"Traceback" not in err
    results = load(out)
    assert not results.complete and results.levels[0].completed > 0
    assert _port_closed(results.target.base_url), "the simulator outlived the run"


def test_repeated_terms_in_a_sweep_keep_the_level_in_flight(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "target: {sim: {base_ms: 5}}\napi: completions\nworkload: {output_tokens: 8, prompt_tokens: 8}\n"
        "load: {levels: [2, 4], duration_s: 4, warmup_s: 0}\n"
    )
    out = tmp_path / "s.json"
    proc = subprocess.Popen(
        [*LOADGEN, "sweep", "--profile", str(profile), "-o", str(out), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not out.exists():  # the checkpoint after level 1: level 2 is in flight
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    for _ in range(3):  # what a process group signalled by several supervisors receives
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert b"Traceback" not in err
    results = load(out)
    assert [level.load.value for level in results.levels] == [2, 4]  # the level in flight is saved, partial
    assert results.levels[0].complete and not results.levels[1].complete


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal mask in /proc")
def test_a_term_before_any_load_says_so_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.Popen([*LOADGEN, *RUN, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not _catches(proc.pid, signal.SIGTERM):  # the handler is in place: the earliest we can answer
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)  # start-up or the preflight, before any level
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert "stopped by SIGTERM" in text and "Traceback" not in text
    assert not out.exists()


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether the process has a handler for ``sig`` (its SigCgt mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the child through /proc")
def test_the_simulator_child_goes_when_loadgen_is_killed(tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    proc = subprocess.Popen(
        [*LOADGEN, *RUN, "--records", str(records), "-o", str(tmp_path / "r.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    _under_way(proc, records)
    child = _simulator_child(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)  # no handler runs: only the closed stdin pipe tells the child
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists(), "the simulator outlived a SIGKILLed parent"


def _simulator_child(parent: int) -> int:
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"loadgen.sim" in cmdline:
            return int(entry.name)
    raise AssertionError("no simulator child found")
