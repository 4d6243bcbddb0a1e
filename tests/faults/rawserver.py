"""A tiny TCP server on 127.0.0.1 that answers every HTTP request with bytes of the test's choosing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from ssl import SSLContext

Reply = Callable[[asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(
    reply: Reply, heads: list[bytes] | None = None, ssl: SSLContext | None = None
) -> AsyncIterator[str]:
    """Serve until the block ends; yields the base URL. Each connection: read one request (its head
    appended to ``heads``), then ``reply``. With ``ssl``, over TLS (an https:// URL)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await read_request(reader)
            if heads is not None:
                heads.append(head)
            await reply(writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ssl)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"{'https' if ssl else 'http'}://127.0.0.1:{port}/v1"


@dataclass(slots=True, kw_only=True)
class KeepAlive:
    """A keep-alive test server's base URL and what its connections did."""

    url: str
    opened: int = 0  # connections accepted so far (each numbered from 1 in that order)
    open_now: int = 0
    most_open: int = 0  # the most connections open at once


@asynccontextmanager
async def keep_alive_server(answer: Callable[[int], Awaitable[bytes]]) -> AsyncIterator[KeepAlive]:
    """Serve until the block ends: every request on a connection is answered with ``await answer(n)``,
    ``n`` the connection's number, and the connection stays open for the next one."""
    state = KeepAlive(url="")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.opened += 1
        state.open_now += 1
        state.most_open = max(state.most_open, state.open_now)
        number = state.opened
        try:
            while True:
                await read_request(reader)
                writer.write(await answer(number))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            state.open_now -= 1
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/"
    async with server:
        yield state


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP request from the stream, its body read by its Content-Length; returns the head."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    await reader.readexactly(length)
    return head


def sends(data: bytes) -> Reply:
    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(data)

    return reply


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def trickles(data: bytes) -> Reply:
    """Write ``data`` one byte per send: every boundary a reader can see."""

    async def reply(writer: asyncio.StreamWriter) -> None:
        for i in range(len(data)):
            writer.write(data[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)

    return reply
