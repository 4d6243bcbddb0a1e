"""Shared test settings: a deterministic hypothesis profile for CI; the real engine started ahead."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.engines.vllm_cpu import EARLY_ENGINE, VllmCpuServer, engine_python

# The suite starts many Python processes (xdist workers, the CLI and the simulator as children), and
# each compiles the package and rewrites the test modules' asserts again unless bytecode is cached:
# with PYTHONDONTWRITEBYTECODE set (as on this project's CI machines) that was a sixth of the logic
# tier's CPU. The caches go to __pycache__/ (ignored by git); the children inherit the setting.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

settings.register_profile(
    "ci", deadline=None, max_examples=60, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

ENGINE_TESTS = f"tests{os.sep}engines{os.sep}"
EARLY_USER = "test_vllm_cpu.py"  # the module whose server starts ahead (the others start their own)


def _is_engine_test(item: pytest.Item) -> bool:
    return ENGINE_TESTS in str(item.path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-engine tests run last: by then the engine started ahead of them is ready."""
    items.sort(key=_is_engine_test)  # stable: every other test keeps its order


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start vLLM now when its tests will run in this process (not under xdist, not deselected).

    It starts at nice 19: its start-up (a minute of several busy threads, more than the one
    CPU-bound process per core the suite is proven against) runs on what the other tests leave
    idle, and its own tests give it its priority back before they use it.
    """
    config = session.config
    python = engine_python()
    under_xdist = hasattr(config, "workerinput") or bool(getattr(config.option, "numprocesses", None))
    if python is None or under_xdist or not any(item.path.name == EARLY_USER for item in session.items):
        return
    server = VllmCpuServer(python, Path(tempfile.mkdtemp(prefix="loadgen-vllm-")))
    config.stash[EARLY_ENGINE] = server
    server.start(background=True)  # a failure here fails the session at once, with vLLM's reason


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop an engine started ahead whose tests never ran (a -x stop, an interrupt) and remove its files."""
    server = session.config.stash.get(EARLY_ENGINE, None)
    if server is not None:
        server.__exit__(None, None, None)
        shutil.rmtree(server.workdir, ignore_errors=True)
