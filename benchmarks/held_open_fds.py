"""Open files of the generator against a server that never ends its answers' HTTP messages.

The server answers every completion with a stream that sends ``[DONE]`` and
then keeps the HTTP message open (no last chunk, ever), on keep-alive
connections. The answer is complete for the caller; the connection is not
reusable until the message ends, which it never does. A client must give such
a connection up rather than pile up new ones: the native wire once held ~800
open files after 12 s at c=4. For each transport, ``loadgen run`` at
``--concurrency`` for ``--duration`` seconds; its open files are sampled every
second (``/proc/PID/fd``, Linux). The bound: concurrency + a small constant
(the control requests, the event loop, stdio). Traffic goes to 127.0.0.1 only.

    python benchmarks/held_open_fds.py                      # 60 s at c=64 on native, aiohttp, httpx
    python benchmarks/held_open_fds.py --duration 10 --transports native
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = b'{"object":"list","data":[{"id":"held","object":"model"}]}'
SLACK = 16  # files beyond the streams: stdio, the loop's self-pipe and selector, control requests, the output


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def serve() -> None:
    """The held-open server; prints its port, serves until killed."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                await reader.readexactly(length)
                if head.startswith(b"GET /v1/models"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                                 % (len(MODELS), MODELS))  # fmt: skip
                elif head.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                                 + _chunk(b'data: {"choices":[{"text":"a"}],"usage":null}\n\n')
                                 + _chunk(b"data: [DONE]\n\n"))  # fmt: skip  # and never the last chunk
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def open_files(pid: int) -> tuple[int, int]:
    """(all open files, sockets) of a process; (0, 0) once it is gone."""
    total = sockets = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            total += 1
            with contextlib.suppress(OSError):
                sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    except OSError:
        return 0, 0
    return total, sockets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--transports", default="native,aiohttp,httpx")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve())
        return
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
    bound = args.concurrency + SLACK
    print(
        f"{'transport':>9} {'seconds':>8} {'max open files':>15} {'sockets':>8} {'bound':>6} {'completed':>10} {'errors':>7} verdict"
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for transport in args.transports.split(","):
                out = Path(tmp) / f"{transport}.json"
                run = subprocess.Popen(
                    [sys.executable, "-m", "loadgen", "run", "--url", url, "--api", "completions",
                     "--concurrency", str(args.concurrency), "--duration", str(args.duration), "--warmup", "0",
                     "--max-tokens", "1", "--transport", transport, "--scrape-metrics", "off", "-o", str(out),
                     "--quiet"],
                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                )  # fmt: skip
                most, most_sockets, started = 0, 0, time.monotonic()
                while run.poll() is None:
                    total, sockets = open_files(run.pid)
                    most, most_sockets = max(most, total), max(most_sockets, sockets)
                    time.sleep(1.0)
                elapsed = time.monotonic() - started
                completed, errors = _counts(out)
                verdict = "ok" if most_sockets <= bound and run.returncode == 0 else f"FAIL (exit {run.returncode})"
                print(f"{transport:>9} {elapsed:>8.0f} {most:>15} {most_sockets:>8} {bound:>6} {completed:>10} "
                      f"{errors:>7} {verdict}")  # fmt: skip
    finally:
        server.kill()


def _counts(path: Path) -> tuple[int, int]:
    import json

    try:
        level = json.loads(path.read_text())["levels"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return 0, 0
    return int(level["completed"]), sum(level["errors"].values())


if __name__ == "__main__":
    main()
