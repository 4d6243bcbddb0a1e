"""Can the simulator keep its law at 256 concurrent streams? Late steps are counted by the engine itself.

Starts the simulator in its own process at max_num_seqs 256 (127.4 ms steps),
opens 256 streams (a first wave opens the connections), then measures a
second wave: the mean inter-chunk gap against the law, and the steps that
started late (``engine_overruns_total``). Traffic goes to 127.0.0.1 only.

    python benchmarks/sim_capacity.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from pathlib import Path

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.engine import EngineConfig  # noqa: E402
from loadgen.sim.openai_app import SimOptions  # noqa: E402
from loadgen.sim.server import SimProcess  # noqa: E402
from tests.sim.streaming import stream  # noqa: E402

STREAMS, TOKENS = 256, 16


def overruns(base_url: str) -> float:
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics").text
    return next(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith("loadgen_sim:engine_overruns_total")
    )


async def main() -> None:
    with SimProcess(SimOptions(engine=EngineConfig(max_num_seqs=STREAMS))) as server:
        body = {"model": "sim-model", "prompt": "one two three", "max_tokens": TOKENS}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:  # no pool cap
            await asyncio.gather(*(stream(s, server.base_url, "completions", body) for _ in range(STREAMS)))
            before = overruns(server.base_url)
            streams = await asyncio.gather(*(stream(s, server.base_url, "completions", body) for _ in range(STREAMS)))
            late = overruns(server.base_url) - before
    gaps = [b - a for st in streams for a, b in zip(st.content_times, st.content_times[1:])]
    law = 25 + 0.4 * STREAMS
    print(f"{STREAMS} streams x {TOKENS} tokens: mean gap {statistics.fmean(gaps) * 1000:.1f} ms "
          f"(law {law:.1f} ms), late steps {late:.0f} (target: at most 1, the burst's own)")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
