"""A zero-work streaming target whose truth is known: fixed TTFT, fixed gap, pre-serialised chunks.

Not the simulator: its batching law makes latency depend on load, and its
per-step bookkeeping would cost more than the client under test. Here every
stream is independent: the first chunk is written ``--ttft-ms`` after the
request arrived, then one chunk every ``--gap-ms``, on absolute deadlines
(no drift), so the truth is TTFT = ttft, TPOT = ITL = gap whatever the load,
as long as this server keeps up (it reports how late it wrote).

    python benchmarks/mock_stream_server.py --port 0   # prints the base URL
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web

HEAD = {"id": "bench", "object": "text_completion", "created": 0, "model": "bench"}


def frames(tokens: int) -> tuple[bytes, bytes, bytes]:
    """(regular chunk, last chunk, usage + done), serialised once."""

    def chunk(finish: str | None) -> bytes:
        body = {**HEAD, "choices": [{"index": 0, "text": "tok ", "logprobs": None, "finish_reason": finish}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    usage = {
        **HEAD,
        "choices": [],
        "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
    }
    return chunk(None), chunk("length"), b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n"


class Mock:
    def __init__(self, ttft_ms: float, gap_ms: float) -> None:
        self.ttft_s, self.gap_s = ttft_ms / 1000, gap_ms / 1000
        self.cache: dict[int, tuple[bytes, bytes, bytes]] = {}
        self.late_writes = 0  # writes more than 2 ms behind their deadline

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model"}]})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"late_writes": self.late_writes})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        tokens = int((await request.json()).get("max_tokens", 16))
        regular, last, tail = self.cache.setdefault(tokens, frames(tokens))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(tokens):
            deadline = t0 + self.ttft_s + i * self.gap_s
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -0.002:
                self.late_writes += 1
            await resp.write(last if i == tokens - 1 else regular)
        await resp.write(tail)
        await resp.write_eof()
        return resp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    args = parser.parse_args()
    mock = Mock(args.ttft_ms, args.gap_ms)
    app = web.Application()
    app.router.add_get("/v1/models", mock.models)
    app.router.add_get("/stats", mock.stats)
    app.router.add_post("/v1/completions", mock.completions)

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"http://127.0.0.1:{port}/v1", flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve())


if __name__ == "__main__":
    main()
