"""Peak memory of ``loadgen run`` under issue 70's hostile reproductions, each in a fresh process.

Each case is the row's own reproduction: a server of this script's (on 127.0.0.1, in a thread) or a
hostile input file, and the ``loadgen run`` command a user would type. The peak RSS of the loadgen
process is read from the kernel (``wait4``); every case must end with one line and a bounded peak.

    python benchmarks/hostile_memory.py            # all five rows, about a minute
    python benchmarks/hostile_memory.py --only S14

Rows: S1 (a continuous-usage jump to 10^18 tokens), S2 (a 4 GB sparse image in --images-folder), S3
(a 200 MB image x --images 8 x concurrency 2), S10 (a gzip of 1 GiB of spaces as --trace), S14 (four
endless reasoning streams, --timeout 60).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

MODELS = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
Answer = Callable[[asyncio.StreamWriter], Awaitable[None]]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def usage_jump(writer: asyncio.StreamWriter) -> None:
    """S1: continuous usage 1, 2, then 10^18."""
    events = b"".join(
        b'data: {"choices":[{"index":0,"delta":{"content":"w "}}],"usage":{"completion_tokens":%d}}\n\n' % n
        for n in (1, 2, 10**18)
    )
    writer.write(HEAD + chunk(events + b"data: [DONE]\n\n") + b"0\r\n\r\n")


ANSWERED = [0]


async def endless_reasoning(writer: asyncio.StreamWriter) -> None:
    """S14: the probes answered, then reasoning deltas for as long as the client reads (at most five minutes)."""
    ANSWERED[0] += 1
    if ANSWERED[0] <= 3:  # the probe and the two prompt-calibration probes
        return await drain_bodies(writer)
    event = b'data: {"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}\n\n'
    writer.write(HEAD)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        writer.write(chunk(event) * 200)
        await writer.drain()


async def drain_bodies(writer: asyncio.StreamWriter) -> None:
    """S3: any answer at all (the request body was read to its end)."""
    writer.write(
        HEAD + chunk(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n') + b"0\r\n\r\n"
    )


def serve(answer: Answer) -> str:
    """A server in a daemon thread that lists model ``m`` and answers every POST with ``answer``."""
    ready = threading.Event()
    url: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
            )
            while length > 0:  # drain the body without holding it
                length -= len(await reader.read(min(length, 1 << 20)))
            if head.startswith(b"GET"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (len(MODELS), MODELS))  # fmt: skip
            else:
                await answer(writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url.append(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        ready.set()
        await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait()
    return url[0]


def measure(args: list[str]) -> tuple[int, float, float, str]:
    """``loadgen`` with ``args`` in a fresh process: exit code, peak RSS in MiB, wall seconds, last stderr line."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "loadgen", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [line for line in err.splitlines() if line.strip()]
    return proc.returncode, usage.ru_maxrss / 1024, time.monotonic() - started, (lines[-1] if lines else "")[:110]


def cases(tmp: Path) -> dict[str, list[str]]:
    quiet = ["--quiet", "--scrape-metrics", "off", "-o", str(tmp / "r.json")]
    big, huge = tmp / "big", tmp / "huge"
    big.mkdir()
    huge.mkdir()
    with (big / "big.png").open("wb") as f:
        f.truncate(4 << 30)  # sparse: 4 GB on paper, nothing on disk
    with (huge / "a.png").open("wb") as f:  # written a MiB at a time: this process stays small, and so the
        f.write(b"\x89PNG\r\n\x1a\n")  # peak its children inherit at fork is not theirs
        for _ in range(200):
            f.write(os.urandom(1 << 20))
    trace = tmp / "trace.jsonl.gz"
    with gzip.open(trace, "wb", compresslevel=9) as out:
        for _ in range(256):
            out.write(b" " * (4 << 20))  # 1 GiB of spaces, packed to about 1 MB
    return {
        "S1": ["run", "--url", serve(usage_jump), "--model", "m", "--concurrency", "2", "--requests", "6",
               "--max-tokens", "8", *quiet],
        "S2": ["run", "--url", "sim", "--virtual-time", "--api", "chat", "--images", "1", "--images-folder", str(big),
               "--concurrency", "1", "--requests", "4", *quiet],
        "S3": ["run", "--url", serve(drain_bodies), "--model", "m", "--api", "chat", "--images", "8",
               "--images-folder", str(huge), "--concurrency", "2", "--requests", "4", *quiet],
        "S10": ["run", "--url", "sim", "--virtual-time", "--trace", str(trace), *quiet],
        "S14": ["run", "--url", serve(endless_reasoning), "--model", "m", "--api", "chat", "--concurrency", "4",
                "--requests", "8", "--max-tokens", "64", "--timeout", "60", *quiet],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated rows (S1,S2,S3,S10,S14)")
    only = {r for r in parser.parse_args().only.split(",") if r}
    with tempfile.TemporaryDirectory() as name:
        print(f"{'row':>4} {'exit':>4} {'peak MiB':>9} {'wall s':>7}  last line")
        for row, args in cases(Path(name)).items():
            if only and row not in only:
                continue
            code, peak, wall, line = measure(args)
            results = Path(name) / "r.json"
            if results.exists():  # what the level counted, where it ran
                level = json.loads(results.read_text())["levels"][0]
                line = f"completed {level['completed']}, errors {level['errors']}"
                results.unlink()
            print(f"{row:>4} {code:>4} {peak:>9.0f} {wall:>7.1f}  {line}")


if __name__ == "__main__":
    main()
