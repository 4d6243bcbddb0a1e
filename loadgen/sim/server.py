"""Network front end of the simulator: serve in the foreground, or embed on a thread.

Binds loopback by default. ``SimServer`` runs the server on its own thread
and event loop, on an ephemeral port, so tests and commands such as
``loadgen sweep`` can start and stop it with a ``with`` block.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from types import TracebackType

from aiohttp import web

from loadgen.sim.openai_app import SimOptions, build_app

LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def start_site(options: SimOptions, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start serving; returns the runner (to clean up) and the bound port."""
    runner = web.AppRunner(build_app(options), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    server = site._server  # aiohttp exposes the bound sockets only here
    assert isinstance(server, asyncio.base_events.Server)
    bound = server.sockets[0].getsockname()[1]
    return runner, int(bound)


async def serve_forever(
    options: SimOptions,
    host: str,
    port: int,
    on_ready: Callable[[int], None],
    *,
    until_stdin_closes: bool = False,
    done: asyncio.Event | None = None,
) -> None:
    """Serve until ``done`` is set (a stop signal, in the CLI), cancelled, or, with ``until_stdin_closes``,
    until standard input ends.

    A parent that starts the simulator holds its standard input open: when the
    parent goes, however it went (SIGKILL included), the pipe closes and the
    simulator follows, its port closed, instead of outliving the run.
    """
    runner, bound = await start_site(options, host, port)
    done = done or asyncio.Event()
    if until_stdin_closes:
        loop = asyncio.get_running_loop()
        fd = sys.stdin.fileno()

        def on_input() -> None:
            if not os.read(fd, 4096):  # end of file: the parent is gone
                loop.remove_reader(fd)
                done.set()

        loop.add_reader(fd, on_input)
    on_ready(bound)
    try:
        await done.wait()
    finally:
        await runner.cleanup()


class SimServer:
    """The simulator on a background thread: ``with SimServer(opts) as s: s.base_url``."""

    def __init__(self, options: SimOptions | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.options = options or SimOptions()
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> SimServer:
        self._thread = threading.Thread(target=self._run, name="loadgen-sim", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            runner, self.port = await start_site(self.options, self.host, self.port)
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()


class SimProcess:
    """The simulator in its own process, so it never competes with the caller for the GIL.

    Load tests should prefer this to ``SimServer``: a server thread waits up
    to the interpreter's switch interval (5 ms) for the GIL whenever the
    client is busy, and misses its step deadlines.
    """

    def __init__(self, options: SimOptions | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.options = options or SimOptions()
        self.host = host
        self.port = port
        self.base_url = ""
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> SimProcess:
        argv = [sys.executable, "-m", "loadgen.sim", "--host", self.host, "--port", str(self.port)]
        # it ends when we end, however we end (its stdin pipe closes), so it never outlives a killed run
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.write(json.dumps(self.options.to_json()) + "\n")  # its options: one line
            self._proc.stdin.flush()
            line = self._proc.stdout.readline().strip()
            if not line.startswith("http://"):
                self._proc.kill()
                _, err = self._proc.communicate(timeout=10)
                raise OSError(f"simulator did not start: {err.strip().splitlines()[-1:] or 'no output'}")
        except BaseException:  # a stop signal while it starts: it must not outlive us
            self._stop_child()
            raise
        self.base_url = line
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop_child()

    def _stop_child(self) -> None:
        if self._proc is None or self._proc.returncode is not None:
            return
        self._proc.terminate()
        try:
            self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
