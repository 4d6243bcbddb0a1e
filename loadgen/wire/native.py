"""A streaming HTTP/1.1 client built for one job: POST a body, stream the answer back, cheaply.

Why not aiohttp or httpx for the load itself: at 256 streams their per-chunk
Python layers (an async iterator step, a re-armed read timer, wrapper
objects) cost more than everything loadgen does with a token. Here each
connection is an ``asyncio.Protocol`` whose bytes go straight into llhttp
(``httptools``, the C parser under uvicorn; chunked transfer included) and
from its body callback straight into the caller's ``Exchange``: one call per
socket read, however many events it carries, and no task switch until the
request is over. A request has one deadline (the caller's), not a timer per
read. Connections are kept alive and reused; TLS goes through asyncio's SSL
transport.

Where it was built (``setup.py``), ``loadgen.wire.fastread`` stands between the
event loop and each connection: the bytes of a streaming body then go from
the socket through llhttp to the request's timestamps without an interpreted
call for a plain token. Everything else still comes here. ``LOADGEN_PURE_WIRE=1``
runs this module alone (the reference the compiled path is tested against).

This module knows HTTP framing only. What the body means (SSE events,
timestamps, the record) is the ``Exchange``'s business
(``loadgen.wire.client``). The control requests (``/models``, ``/metrics``) stay
on httpx, where speed does not matter.
"""

from __future__ import annotations

import asyncio
import functools
import os
import select
import ssl
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

import httptools

from loadgen.errors import ErrorKind

MAX_HEADER_BYTES = 64 * 1024  # a response whose headers exceed this is not one we want (a hostile server)
SWITCHED_PROTOCOLS = "the server switched protocols (101)"  # every transport's name for a 101 answer


def _compiled_reader() -> ModuleType | None:
    """The compiled per-read path, unless it was not built or ``LOADGEN_PURE_WIRE`` is set."""
    if os.environ.get("LOADGEN_PURE_WIRE", "").strip() not in ("", "0"):
        return None
    try:
        from loadgen.wire import fastread
    except ImportError:
        return None
    return fastread


FASTREAD = _compiled_reader()
READ_PATH = "compiled" if FASTREAD is not None else "python"  # said in the results' settings


class Exchange(Protocol):
    """What one request's response is handed to, in order, from the connection's callbacks."""

    def on_response(self, status: int, content_type: str) -> bool:
        """The status and headers have arrived; return False to stop reading (the answer is not a stream)."""

    def on_body(self, data: bytes, tested: bool = False) -> bool:
        """A piece of the body (de-chunked); return False once nothing more is wanted ([DONE]).
        ``tested``: the compiled reader found it is not one plain token (the same test need not run again)."""

    def on_end(self, kind: ErrorKind | None, detail: str | None) -> None:
        """The exchange is over: complete (None), or failed with a kind and a short reason."""

    def lane(self) -> tuple[Any, ...] | None:
        """What the compiled reader needs to take plain tokens itself (``fastread.Port.arm``'s arguments),
        asked once the headers said the body streams; None: every piece comes to ``on_body``."""


class _HeadersTooLarge(Exception):
    """Raised from the header callback to stop the parser."""


def has_input(transport: asyncio.BaseTransport | None) -> bool:
    """Whether an idle connection's socket has something to read (one poll, no wait): the server's close
    that the event loop has not processed yet, or bytes nobody asked for. Either way it is no connection
    to send a request on. This wire's pool and the aiohttp pool (``loadgen.wire.client``) both ask."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    if not hasattr(select, "poll"):  # Windows: select takes any handle value
        return bool(select.select([sock], [], [], 0)[0])
    poller = select.poll()  # not select.select here: descriptors past 1023 are common at high concurrency
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def input_probe(transport: asyncio.BaseTransport | None) -> Callable[[], bool]:
    """``has_input`` for one connection, its poller made once: a connection is polled before every reuse."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or not hasattr(select, "poll"):
        return functools.partial(has_input, transport)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return lambda: bool(poller.poll(0))


class _Connection(asyncio.Protocol):
    """One keep-alive connection; serves one exchange at a time."""

    def __init__(self, pool: Wire) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        # the event loop's and llhttp's counterpart: the compiled port where it is used, else this object
        self.port: Any = FASTREAD.Port(self) if pool.compiled and FASTREAD is not None else None
        self.protocol: asyncio.Protocol = self.port if self.port is not None else self
        self.parser = httptools.HttpResponseParser(self.protocol)
        if self.port is not None:
            self.port.parser = self.parser
        # a bare LF ends a line as CRLF does (RFC 9112 2.2 lets a recipient accept it; aiohttp and httpx do)
        self.parser.set_dangerous_leniencies(lenient_optional_cr_before_lf=True)
        self.exchange: Exchange | None = None
        self.done: asyncio.Future[None] | None = None
        self.closed = False
        self.in_body = False
        self.header_bytes = 0  # of header names and values (llhttp's complete headers)
        self.head_bytes = 0  # read before the headers were complete (status line and headers as they arrive)
        self.content_type = b""
        self.framed = False  # the body's end is marked (a length or chunking), not the connection's close
        self.wanted = True  # the exchange still reads the body
        self.interim = False  # reading a 1xx response that comes before the answer
        self.expired = False  # the exchange's deadline passed before its answer ended
        # one deadline timer per connection, not per exchange (see ``_deadline``): the exchanges begun on it
        self.deadline = 0.0  # the exchange in flight's, on the loop's clock
        self.exchanges = 0
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0  # when the timer fires
        self.has_input: Callable[[], bool] | None = None  # its socket's poll, made at the first reuse

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses
        self.pool.open.add(self)

    def data_received(self, data: bytes) -> None:
        self.head_bytes += 0 if self.in_body else len(data)
        try:
            self.parser.feed_data(data)
            if not self.in_body and self.head_bytes > MAX_HEADER_BYTES and self.exchange is not None:
                # llhttp buffers a header (or status line) until it ends: an endless one would grow
                # without bound, so the head is capped as it arrives, not when it is complete
                raise _HeadersTooLarge
        except (_HeadersTooLarge, httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.feed_failed(exc)

    def feed_failed(self, exc: Exception) -> None:
        """End the exchange for what stopped llhttp (the compiled port's body reads end here too)."""
        cap = f"{MAX_HEADER_BYTES // 1024} KiB"
        if isinstance(exc, _HeadersTooLarge):
            self._finish(ErrorKind.PROTOCOL, f"response head over {cap}", reusable=False)
        elif isinstance(exc, httptools.HttpParserCallbackError):
            cause = exc.__context__ or exc
            if isinstance(cause, _HeadersTooLarge):
                self._finish(ErrorKind.PROTOCOL, f"response headers over {cap}", reusable=False)
            else:  # an Exchange callback raised: a bug, named in the failure rather than lost in a log
                self._finish(ErrorKind.STREAM_BROKEN, f"{type(cause).__name__}: {cause}", reusable=False)
        elif isinstance(exc, httptools.HttpParserUpgrade):  # 101 Switching Protocols: no answer this client reads
            self._finish(ErrorKind.PROTOCOL, SWITCHED_PROTOCOLS, reusable=False)
        else:  # a bad status line, header or chunk framing: not HTTP
            self._finish(ErrorKind.PROTOCOL, f"invalid HTTP response ({type(exc).__name__})", reusable=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_timer()
        self.pool.open.discard(self)
        self.pool.forget_draining(self)
        if self.exchange is not None:
            if self.in_body and not self.framed:  # a body without length or chunking ends with the connection
                self._finish(None, None, reusable=False)
                return
            # before the headers: nothing came back (as a reset or a refused request); after: a broken stream
            kind = ErrorKind.STREAM_BROKEN if self.in_body else ErrorKind.CONNECT
            reason = "connection closed mid-stream" if self.in_body else "connection closed before a response"
            self._finish(kind, reason, reusable=False)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value)
        if self.header_bytes > MAX_HEADER_BYTES:
            raise _HeadersTooLarge
        name = name.lower()
        if name == b"content-type":
            self.content_type = value
        elif name in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        if 100 <= self.parser.get_status_code() < 200:  # 100 Continue, 103 Early Hints: the answer follows
            self.interim = True
            self.header_bytes, self.content_type, self.framed = 0, b"", False
            return
        self.in_body = True
        self.wanted = exchange.on_response(self.parser.get_status_code(), self.content_type.decode("latin-1"))
        if not self.wanted:
            self._finish(None, None, reusable=False)
        elif self.port is not None and (lane := exchange.lane()) is not None:
            self.port.arm(*lane)

    def on_body(self, body: bytes, tested: bool = False) -> None:
        """A piece of the body from llhttp; ``tested``: from the compiled port, whose plain-token test it failed."""
        if self.exchange is not None and self.wanted:
            self.wanted = self.exchange.on_body(body, tested)
            if not self.wanted:
                # [DONE] or enough of an error body: the answer is complete for the caller; the
                # connection is reusable only once the rest of the message has been read
                self._finish(None, None, reusable=None)

    def on_message_complete(self) -> None:
        if self.interim:  # the end of an interim response, not of the answer
            self.interim = False
            return
        if self.exchange is not None:
            self._finish(None, None, reusable=True)
        elif self.done is not None and not self.closed:  # finished early, now fully read
            self._release(self.parser.should_keep_alive())

    # exchange bookkeeping
    def start(self, exchange: Exchange, request: bytes) -> asyncio.Future[None]:
        assert self.transport is not None
        self.exchange, self.in_body, self.header_bytes, self.head_bytes, self.wanted = exchange, False, 0, 0, True
        self.content_type, self.framed, self.interim, self.expired = b"", False, False, False
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.done

    def _finish(self, kind: ErrorKind | None, detail: str | None, *, reusable: bool | None) -> None:
        """End the exchange; ``reusable`` None: decide when the message has been read to its end."""
        exchange, self.exchange = self.exchange, None
        if self.port is not None:
            self.port.disarm()
        if exchange is not None:
            exchange.on_end(kind, detail)
        if self.done is not None and not self.done.done():
            self.done.set_result(None)
        if reusable is True:
            self._release(self.parser.should_keep_alive())
        elif reusable is False:
            self._release(False)
        else:
            self.pool.draining.append(self)

    def watch(self, deadline: float) -> None:
        """Begin the next exchange's clock: it expires at ``deadline`` (the loop's time) unless it ends first.

        A timer made and cancelled for every request cost ~4 us warm, more between a level's reads. The
        connection keeps one instead: a timer that fires for an exchange that has since ended is armed
        again for the one in flight, so each exchange still expires exactly at its own deadline, and a
        connection reused well within the timeout makes no timer at all. A deadline earlier than the
        timer's (a shorter timeout than the last exchange's) moves the timer to it.
        """
        self.exchanges += 1
        self.deadline = deadline
        if self.timer is None or deadline < self.timer_at:
            self._arm()

    def _arm(self) -> None:
        """The timer, at the deadline of the exchange in flight (and of no other)."""
        self._stop_timer()
        self.timer_at = self.deadline
        self.timer = asyncio.get_running_loop().call_at(self.deadline, self._deadline, self.exchanges)

    def _stop_timer(self) -> None:
        """A closed connection's timer is not left on the loop until a deadline minutes away."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _deadline(self, exchange: int) -> None:
        self.timer = None
        if self.exchange is None:
            return  # idle: the next exchange arms it again
        if exchange == self.exchanges:  # the timer was set at this very exchange's deadline
            self.expired = True
            self._finish(ErrorKind.TIMEOUT, "deadline", reusable=False)
        else:
            self._arm()

    def _release(self, keep: bool) -> None:
        self.done = None
        self.pool.forget_draining(self)
        if keep and not self.closed:
            self.pool.idle.append(self)
        else:
            self.abort()

    def readable(self) -> bool:
        """Whether the idle socket has something to read: the server's close (a keep-alive timeout)
        that the event loop has not processed yet, or bytes no request asked for. Either way it is no
        longer a clean idle connection: a request sent on it would fail for nothing the server did.
        One poll of the socket; what is left is a close that arrives while the request is in flight,
        which no client can tell from a server that dropped the request (and is counted as such)."""
        if self.has_input is None:
            self.has_input = input_probe(self.transport)
        return self.has_input()

    def abort(self) -> None:
        self.closed = True
        self._stop_timer()
        if self.port is not None:
            self.port.disarm()
        if self.transport is not None:
            self.transport.abort()


class Wire:
    """A pool of keep-alive connections to one origin, for streaming POSTs."""

    def __init__(
        self,
        base_url: str,
        *,
        verify_tls: bool = True,
        connect_timeout_s: float = 30.0,
        max_connections: int = 0,
        compiled: bool = True,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the native transport needs an http:// or https:// URL, got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self.ssl = ssl.create_default_context()
            if not verify_tls:
                self.ssl.check_hostname = False
                self.ssl.verify_mode = ssl.CERT_NONE
        self.connect_timeout_s = connect_timeout_s
        self.compiled = compiled and FASTREAD is not None  # read streaming bodies with loadgen.wire.fastread
        self.limit = asyncio.Semaphore(max_connections) if max_connections > 0 else None
        self.idle: list[_Connection] = []
        self.open: set[_Connection] = set()
        # answers over for their caller ([DONE], enough of an error body) whose HTTP message has not ended:
        # reusable once it does, but a server may never end it, so each is given up for a new connection
        self.draining: list[_Connection] = []

    def forget_draining(self, conn: _Connection) -> None:
        if conn in self.draining:
            self.draining.remove(conn)

    async def post(self, request: bytes, exchange: Exchange, timeout_s: float) -> bool:
        """Send one serialised request and feed its answer to ``exchange`` until it ends; False when it
        did not end within ``timeout_s`` (the connection is then dropped, and the exchange told).

        The deadline is the connection's one timer (``_Connection.watch``), not one per request; only
        the waits before sending (a slot under ``max_connections``, a new connection) run under an
        ``asyncio.timeout``, which costs several times more a request. Cancelled (the level's end, an
        interrupt): the connection is dropped and the exchange is told nothing (the caller knows why).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        conn = self._reuse() if self.limit is None else None
        acquired = False
        try:
            if conn is None:
                try:
                    async with asyncio.timeout_at(deadline):
                        if self.limit is not None:
                            await self.limit.acquire()
                            acquired = True
                        conn = await self._connection(exchange)
                except TimeoutError:
                    return False
                if conn is None:
                    return True
            conn.watch(deadline)
            try:
                await conn.start(exchange, request)
            except asyncio.CancelledError:
                conn.exchange = None
                conn.abort()
                raise
            return not conn.expired
        finally:
            if acquired and self.limit is not None:
                self.limit.release()

    def _reuse(self) -> _Connection | None:
        """An idle connection still open, with nothing to read (see ``_Connection.readable``); None: none is."""
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and not conn.readable():
                return conn
            conn.abort()
        return None

    async def _connection(self, exchange: Exchange) -> _Connection | None:
        """An idle connection still open, or a new one; None when none could be made (exchange told).

        A new connection replaces the oldest draining one, so the connections held never outnumber the
        requests in flight: a server that never ends its messages cannot make them pile up. One that
        already sent the rest (waiting in its socket) gets one turn of the loop to become idle first.
        """
        if not self.idle and any(conn.readable() for conn in self.draining):
            await asyncio.sleep(0)
        if (conn := self._reuse()) is not None:
            return conn
        if self.draining:
            self.draining.pop(0).abort()
            await asyncio.sleep(0)  # its socket closes on the loop's next turn: before this one opens another
        loop = asyncio.get_running_loop()
        made: list[_Connection] = []

        def connection() -> asyncio.Protocol:
            made.append(_Connection(self))
            return made[-1].protocol

        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await loop.create_connection(
                    connection,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None,
                )
        except TimeoutError:
            exchange.on_end(ErrorKind.CONNECT, f"no connection within {self.connect_timeout_s:g} s")
            return None
        except OSError as exc:  # refused, unreachable, TLS (ssl.SSLError is an OSError)
            exchange.on_end(ErrorKind.CONNECT, type(exc).__name__)
            return None
        return made[-1]

    async def close(self) -> None:
        for conn in list(self.open):
            conn.abort()
        self.open.clear()
        self.idle.clear()
        self.draining.clear()
