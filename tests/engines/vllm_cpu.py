"""A real vLLM (its CPU build) serving a tiny random model on 127.0.0.1, for the real-engine tests.

The engine lives in its own virtual environment (``prepare_vllm_cpu.sh``), named by
``LOADGEN_VLLM_PYTHON``; loadgen never imports it. Start-up takes about a minute on two cores.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import httpx
import pytest

HERE = Path(__file__).parent
MODEL = "tiny"
#: vLLM compiles its CPU kernels and warms up on first start: allow for a busy machine.
START_TIMEOUT_S = 600.0


def engine_python() -> str | None:
    """The engine's interpreter, or None when this machine has none (the tests then skip, saying why)."""
    path = os.environ.get("LOADGEN_VLLM_PYTHON", "")
    return path if path and Path(path).is_file() else None


def required_engine_python() -> str:
    """The engine's interpreter; where this machine has none, the test skips saying how to get one."""
    python = engine_python()
    if python is None:
        pytest.skip(
            "REAL ENGINE NOT TESTED: vLLM's CPU build is not installed here; run "
            "`export LOADGEN_VLLM_PYTHON=$(bash tests/engines/prepare_vllm_cpu.sh)` (as .ci/run does)"
        )
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmCpuServer:
    """``vllm`` serving the tiny model; ``base_url`` ends in ``/v1``. Logs go to ``log_path``."""

    def __init__(self, python: str, workdir: Path, *, max_num_seqs: int = 8, extra_args: tuple[str, ...] = ()) -> None:
        self.python = python
        self.workdir = workdir
        self.max_num_seqs = max_num_seqs
        self.extra_args = extra_args  # more of vLLM's flags (a speculative config, say)
        self.log_path = workdir / "vllm.log"
        self.base_url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, *, background: bool = False) -> VllmCpuServer:
        """Build the model and launch the server without waiting for it (its start-up is ~a minute).

        ``background``: at nice 19, so it takes only CPU time the rest of the suite leaves idle
        (its real-time tests must not see it); ``promote`` gives it back its priority.
        """
        model_dir = self.workdir / "model"
        subprocess.run([self.python, str(HERE / "tiny_model.py"), str(model_dir)], check=True, capture_output=True)
        port = _free_port()
        # The module entry point, not the ``vllm`` script: the CPU distribution is named
        # ``vllm-cpu``, and the script's ``--version`` lookup of ``vllm`` fails at start.
        argv = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
                "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", str(self.max_num_seqs),
                *self.extra_args]  # fmt: skip
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=(lambda: os.nice(19)) if background else None,  # inherited by all it starts
            )
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    def __enter__(self) -> VllmCpuServer:
        if self._proc is None:  # not started ahead by the suite (tests/conftest.py)
            self.start()
        self._wait_ready()
        return self

    def promote(self) -> bool:
        """Back to nice 0, the engine and every process it started (one process group); False if not allowed."""
        assert self._proc is not None
        try:
            os.setpriority(os.PRIO_PGRP, self._proc.pid, 0)
        except PermissionError:  # raising a priority needs root or CAP_SYS_NICE
            return False
        return True

    @contextlib.contextmanager
    def pinned_apart(self) -> Iterator[None]:
        """The engine (every thread of every process it started) on the first core, this process on the second,
        as the issue-25 and -30 measurements ran: unpinned on two cores, vLLM's API process and engine core
        take the client's core at moments, and a latency tail measures the contention (the level reads
        client-bound). Where there are fewer than two cores, nothing is pinned."""
        assert self._proc is not None
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            yield
            return
        engine_tasks = [
            (int(pid), int(tid))
            for pid in os.listdir("/proc")
            if pid.isdigit() and _group_of(int(pid)) == self._proc.pid
            for tid in os.listdir(f"/proc/{pid}/task")
        ]
        saved = {tid: os.sched_getaffinity(tid) for _, tid in engine_tasks if _alive(tid)}
        own = os.sched_getaffinity(0)
        try:
            for tid in saved:
                os.sched_setaffinity(tid, {cores[0]})
            os.sched_setaffinity(0, {cores[1]})
            yield
        finally:
            os.sched_setaffinity(0, own)
            for tid, mask in saved.items():
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(tid, mask)

    def _wait_ready(self) -> None:
        """Polls ``/v1/models`` until it answers (a readiness signal, not a fixed sleep)."""
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise OSError(f"vLLM exited with {self._proc.returncode} at start: {self.tail()}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.__exit__(None, None, None)
        raise OSError(f"vLLM did not answer within {START_TIMEOUT_S:.0f} s: {self.tail()}")

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is None:
            return
        # vLLM runs its engine core and workers as child processes: stop the whole group.
        try:
            os.killpg(self._proc.pid, 15)
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, 9)
            self._proc.wait()
        except ProcessLookupError:
            pass
        self._proc = None


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _alive(tid: int) -> bool:
    try:
        os.sched_getaffinity(tid)
    except ProcessLookupError:
        return False
    return True


#: the server ``tests/conftest.py`` starts as collection ends, so its minute of start-up overlaps the suite
EARLY_ENGINE = pytest.StashKey[VllmCpuServer]()
