"""A deliberately independent SSE reader for checking the simulator over real sockets.

It shares no code with loadgen's own client, so a bug in one cannot hide a
bug in the other.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class Stream:
    status: int = 0
    events: list[Any] = field(default_factory=list)  # parsed JSON events, "[DONE]" kept as a string
    content_times: list[float] = field(default_factory=list)  # the loop's clock at each text chunk

    @property
    def texts(self) -> list[str]:
        out = []
        for e in self.events:
            if isinstance(e, dict) and e.get("choices"):
                c = e["choices"][0]
                text = c.get("text") if "text" in c else c.get("delta", {}).get("content")
                if text:
                    out.append(text)
        return out

    def gaps_ms(self) -> list[float]:
        t = self.content_times
        return [(b - a) * 1000 for a, b in itertools.pairwise(t)]


async def stream(session: aiohttp.ClientSession, base_url: str, api: str, body: dict[str, Any]) -> Stream:
    path = "/chat/completions" if api == "chat" else "/completions"
    out = Stream()
    async with session.post(base_url + path, json={**body, "stream": True}) as resp:
        out.status = resp.status
        buf = b""
        async for chunk in resp.content.iter_any():
            now = asyncio.get_running_loop().time()  # monotonic; virtual on a virtual-time loop
            buf += chunk
            while b"\n\n" in buf:
                frame, buf = buf.split(b"\n\n", 1)
                data = frame.decode().removeprefix("data: ")
                if data == "[DONE]":
                    out.events.append(data)
                    continue
                event = json.loads(data)
                out.events.append(event)
                choices = event.get("choices") or [{}]
                text = choices[0].get("text") or choices[0].get("delta", {}).get("content")
                if text:
                    out.content_times.append(now)
    return out
