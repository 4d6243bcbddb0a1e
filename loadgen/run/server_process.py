"""A server ``loadgen tune`` starts and stops itself: its own process group, its log kept, never left running.

The command runs in a new session (so a terminal's Ctrl-C reaches this process, not the server, and the
server's children are one group to stop); its output goes to a log file. Ready means ``/models`` answered
200. A server that exits before that refused its configuration (a rejected flag, out of memory at load);
one that does not answer within the start timeout never became ready: both are named outcomes carrying
the log's last lines. Stopping sends SIGTERM to the group, then SIGKILL after a grace period, and
waits for the leader, so no server outlives the ``with`` block, whatever ends it (a failure, an exception,
Ctrl-C).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import httpx

READY_POLL_S = 0.5
STOP_GRACE_S = 15.0  # SIGTERM, then this long for the group to exit, then SIGKILL
LOG_TAIL_LINES = 8
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ServerOutcome(StrEnum):
    """How a start ended."""

    READY = "ready"
    REFUSED = "refused"  # exited before it answered: the configuration, a flag, memory
    NEVER_READY = "never_ready"  # still running, not answering, at the start timeout


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStart:
    """One start of the server: how it ended, in how long, and the log's last lines where it did not start."""

    outcome: ServerOutcome
    seconds: float
    tail: tuple[str, ...] = ()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last ``lines`` non-empty lines of ``log`` (its last 64 KiB read), each cut to 300 characters."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ()
    return tuple(line[:300] for line in text.splitlines() if line.strip())[-lines:]


@contextlib.contextmanager
def running_server(command: str, url: str, log: Path, start_timeout_s: float) -> Iterator[ServerStart]:
    """Start ``command``, wait until ``url``/models answers, yield how the start went; always stop it after."""
    started = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(  # the user's own server command, split as a shell would
            shlex.split(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    try:
        outcome = _wait_ready(proc, url, started + start_timeout_s)
        tail = () if outcome is ServerOutcome.READY else log_tail(log)
        yield ServerStart(outcome=outcome, seconds=time.monotonic() - started, tail=tail)
    finally:
        stop(proc)


def _die_with_parent() -> None:
    """In the server's process, before it runs: on Linux, SIGTERM it when tune dies, even by SIGKILL (a
    CI job's hard timeout), which no cleanup of tune's own can answer."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, deadline: float) -> ServerOutcome:
    models = url.rstrip("/") + "/models"
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return ServerOutcome.REFUSED
            with contextlib.suppress(httpx.HTTPError):
                if client.get(models).status_code == 200:
                    return ServerOutcome.READY
            time.sleep(READY_POLL_S)
    return ServerOutcome.REFUSED if proc.poll() is not None else ServerOutcome.NEVER_READY


def stop(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the server's group, SIGKILL to it after ``grace_s``; returns once the leader is reaped."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
            if not _group_alive(proc.pid):
                return


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (a server's workers outliving its leader)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
