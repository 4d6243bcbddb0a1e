"""loadgen's streaming cost against the cheapest Python client we know, side by side in one run.

The floor is a minimal aiohttp streaming loop (C clients in a closed loop,
read the body, count chunks, stamp nothing, parse nothing) on uvloop and on
asyncio's own loop. Against it: ``loadgen run``, native transport on each
loop, and the aiohttp transport on uvloop. Every
contender streams from ``mock_stream_server.py`` (TTFT 50 ms, gap 10 ms,
128 tokens) pinned to the last CPU, itself pinned to the first; each prints
its own CPU seconds (user+sys over the measured window only) per 1000
streamed tokens. Contenders are interleaved round by round, so a slow
moment of the machine hits them all. Traffic goes to 127.0.0.1 only.

    python benchmarks/wire_floor.py                       # c=256, 3 rounds, about 4 minutes
    python benchmarks/wire_floor.py --concurrency 64 --rounds 1 --duration 5
    python benchmarks/wire_floor.py --only "native, uvloop|Python path" --rounds 7   # the native wire's two paths
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

from client_overhead import TOKENS, expected_tok_s, pin, run_level, start_server


def minimal_loop(
    url: str, concurrency: int, duration: float, warmup: float, loop: str, child: str = "_minimal_child"
) -> dict[str, float]:
    """Run a minimal client (``child``) in a pinned child process; returns its CPU s per 1k tokens and tok/s."""
    code = f"import sys; sys.argv = ['x', {url!r}, '{concurrency}', '{duration}', '{warmup}', '{loop}']; " + (
        f"from wire_floor import {child}; {child}()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        preexec_fn=pin(0),
        timeout=duration + warmup + 60,
        cwd=os.path.dirname(os.path.abspath(__file__)),
        check=True,
    )
    return dict(json.loads(out.stdout))


def _minimal_child() -> None:
    import aiohttp

    url, concurrency, duration, warmup, loop = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:5]), sys.argv[5]
    body = json.dumps({"model": "bench", "prompt": "hi", "max_tokens": TOKENS, "stream": True}).encode()
    counted = {"chunks": 0}
    window = {"on": False}

    async def client(session: aiohttp.ClientSession, stop_at: float) -> None:
        try:
            while time.monotonic() < stop_at:
                async with session.post(url + "/completions", data=body) as resp:
                    async for _ in resp.content.iter_any():
                        if window["on"]:
                            counted["chunks"] += 1
        except aiohttp.ClientError:  # cut off when the run ends
            pass

    async def main() -> dict[str, float]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            start = time.monotonic()
            tasks = [asyncio.create_task(client(session, start + warmup + duration)) for _ in range(concurrency)]
            await asyncio.sleep(warmup)
            window["on"], cpu0, t0 = True, time.process_time(), time.monotonic()
            await asyncio.sleep(duration)
            window["on"], cpu, span = False, time.process_time() - cpu0, time.monotonic() - t0
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        # a socket read may carry several chunks: count tokens by the expected rate, reads as a check
        tokens = expected_tok_s(concurrency) * span
        return {"cpu_s_per_1k_tok": cpu / tokens * 1000, "reads": counted["chunks"], "tok_s": tokens / span}

    if loop == "uvloop":
        import uvloop

        result = uvloop.run(main())
    else:
        result = asyncio.run(main())
    print(json.dumps(result))


def _protocol_child() -> None:
    """The floor under every Python client that wakes once per token event: a bare protocol that counts bytes.

    One ``asyncio.Protocol`` per connection, the request pre-serialised, the
    body's end found by the chunked terminator; no HTTP parser, no SSE, no
    timestamps. What it costs is the event loop's and the kernel's share.
    """
    import uvloop

    url, concurrency, duration, warmup = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:5])
    host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
    body = json.dumps({"model": "bench", "prompt": "hi", "max_tokens": TOKENS, "stream": True}).encode()
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    class Counter(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            transport.write(request)  # type: ignore[attr-defined]

        def data_received(self, data: bytes) -> None:
            if data.endswith(b"0\r\n\r\n"):
                self.transport.write(request)  # type: ignore[attr-defined]

    async def main() -> dict[str, float]:
        loop = asyncio.get_running_loop()
        conns = [await loop.create_connection(Counter, host, int(port)) for _ in range(concurrency)]
        await asyncio.sleep(warmup)
        cpu0, t0 = time.process_time(), time.monotonic()
        await asyncio.sleep(duration)
        cpu, span = time.process_time() - cpu0, time.monotonic() - t0
        for transport, _ in conns:
            transport.close()
        tokens = expected_tok_s(concurrency) * span
        return {"cpu_s_per_1k_tok": cpu / tokens * 1000, "tok_s": tokens / span}

    print(json.dumps(uvloop.run(main())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", default="", help="words separated by |: run the contenders naming any (and the two floors)"
    )
    args = parser.parse_args()
    server, url = start_server()
    contenders = [
        "bare protocol, uvloop",
        "aiohttp minimal, uvloop",
        "aiohttp minimal, asyncio",
        "loadgen aiohttp, uvloop",
        "loadgen native, uvloop",
        "loadgen native (Python path), uvloop",
        "loadgen native, asyncio",
    ]
    if args.only:
        words = args.only.split("|")
        contenders = [
            c for c in contenders if c.startswith(("bare", "aiohttp minimal, uvloop")) or any(w in c for w in words)
        ]
    costs: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        for _ in range(args.rounds):
            for name in contenders:
                kind, loop = name.split(", ")
                if kind == "aiohttp minimal":
                    r = minimal_loop(url, args.concurrency, args.duration, 2.0, loop)
                elif kind == "bare protocol":
                    r = minimal_loop(url, args.concurrency, args.duration, 2.0, loop, "_protocol_child")
                else:
                    pure = "Python path" in kind  # LOADGEN_PURE_WIRE=1: without the compiled reader
                    transport = kind.split()[1]
                    r = run_level(
                        url, args.concurrency, args.duration, 1, transport, event_loop=loop, pure=pure, records=False
                    )
                costs[name].append(r["cpu_s_per_1k_tok"])
                time.sleep(0.5)
        # ratios are taken round by round (the contenders of a round ran within a minute of each other,
        # so a slower hour of the machine cancels out), then their median
        floor, bare = costs["aiohttp minimal, uvloop"], costs["bare protocol, uvloop"]
        print(f"c={args.concurrency}, {args.rounds} rounds of {args.duration:g} s; CPU s per 1k streamed tokens")
        print(f"{'contender':<38} {'median':>8} {'min':>8} {'max':>8} {'vs floor':>9} {'vs bare':>8}")
        for name in contenders:
            xs = costs[name]
            vs_floor = statistics.median(x / f for x, f in zip(xs, floor, strict=True))
            vs_bare = statistics.median(x / b for x, b in zip(xs, bare, strict=True))
            print(
                f"{name:<38} {statistics.median(xs):>8.4f} {min(xs):>8.4f} {max(xs):>8.4f} "
                f"{vs_floor:>8.2f}x {vs_bare:>7.2f}x"
            )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
