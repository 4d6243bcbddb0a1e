# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The native wire's per-read work in C: one socket read of a streaming answer, from the socket to the timestamps.

Pure Python, a streamed token costs four interpreted calls before it is a timestamp: the
connection's ``data_received``, llhttp's body callback into the connection, the exchange's
``on_body``, and the chunk test (``token_chunk``: orjson and a few dict lookups). Here a
``Port`` stands between the event loop and a ``loadgen.wire.native._Connection``: while a streaming
body is being read it feeds the socket's bytes to llhttp itself, takes llhttp's body callback itself,
and recognises the common piece (one ``data: {...}\\n\\n`` event holding one plain token: an answer's,
a reasoning model's thought, or a tool call's arguments) by its bytes, stamping the clock once and
appending to the request's lists. Anything else (the head, an interim
response, a piece that is not one whole event, a chunk of another shape, invalid UTF-8, an escape in
a text it keeps) goes to the connection's Python methods, which decide exactly as without this module.

How a chunk is recognised without parsing it: the first plain token of a request is read by
``token_chunk`` (the Python path's own test); its bytes are then cut around the text's JSON
string into a prefix and a suffix, and the cut is proved by parsing the chunk again with a sentinel
string in the text's place. A later chunk that is the same prefix, one valid JSON string (without
escapes where its text is kept), and the same suffix has the same JSON structure, so the Python test
would accept it too, with that string as its text, and of the same kind. (The sentinel parse fails if
the cut falls inside another string: its letters would be bare tokens.) A reasoning model's stream
learns a second cut where its answer begins, an agent's where the tool call's arguments begin.

``loadgen.wire.native`` uses this module when it is built (``setup.py``) and ``LOADGEN_PURE_WIRE``
is not set; ``tests/faults/test_compiled_read.py`` holds its results identical to the Python path's.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append, PyList_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcmp

import json
import time

import httptools
import orjson

cdef extern from *:
    """
    #include <time.h>
    #if defined(__linux__)
    /* time.monotonic on Linux, to the bit: CLOCK_MONOTONIC in whole ns, then seconds as CPython converts them */
    #define LOADGEN_MONOTONIC_IN_C 1
    static double loadgen_monotonic(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        volatile double d = (double)((long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec);
        d /= 1e9;
        return d;
    }
    #else
    #define LOADGEN_MONOTONIC_IN_C 0  /* elsewhere time.monotonic reads another clock: it is called */
    static double loadgen_monotonic(void) { return 0.0; }
    #endif
    """
    const bint MONOTONIC_IN_C "LOADGEN_MONOTONIC_IN_C"
    double loadgen_monotonic()

cdef tuple PARSER_ERRORS = (httptools.HttpParserError, httptools.HttpParserUpgrade)
cdef object CALLBACK_ERROR = httptools.HttpParserCallbackError
cdef object MONOTONIC = time.monotonic
cdef Py_ssize_t HELD = 256  # token times held in C before they go into the exchange's list
cdef Py_ssize_t MAX_SIZE_DIGITS = 6  # a chunk up to 16 MiB is framed here; a longer one goes to llhttp
cdef bytes SENTINEL = b"Zq7loadgenSentinel4w"  # letters only: cut inside another string, it is no JSON
cdef bytes SENTINEL_LITERAL = b'"' + SENTINEL + b'"'
cdef str SENTINEL_TEXT = SENTINEL.decode()
cdef int ANSWER = 0, REASONING = 1, TOOL_ARGUMENTS = 2  # loadgen.wire.token_chunks' kinds of a token chunk


cdef inline bint hex_digit(unsigned char c) noexcept:
    return 48 <= c <= 57 or 97 <= c <= 102 or 65 <= c <= 70


cdef inline bint json_string(const unsigned char* s, Py_ssize_t n, bint escapes) noexcept:
    """Whether ``s[:n]`` (n >= 1) is a JSON string's content in strict UTF-8: with nothing to unescape, or
    (``escapes``) with escapes too, a ``\\uXXXX`` outside the surrogates (a pair, or a lone one, goes the
    Python way, which decides)."""
    cdef Py_ssize_t i = 0, code
    cdef unsigned char c, c1
    cdef int extra, k
    while i < n:
        c = s[i]
        if c < 0x80:
            if c < 0x20 or c == 0x22:  # control character, quote
                return False
            if c == 0x5C:  # backslash
                if not escapes or i + 1 >= n:
                    return False
                c1 = s[i + 1]
                if c1 == 0x75:  # \uXXXX
                    if i + 5 >= n:
                        return False
                    code = 0
                    for k in range(2, 6):
                        if not hex_digit(s[i + k]):
                            return False
                        c = s[i + k]
                        code = code * 16 + (c - 48 if c <= 57 else (c | 0x20) - 87)
                    if 0xD800 <= code <= 0xDFFF:
                        return False
                    i += 6
                    continue
                if c1 not in b'"\\/bfnrt':
                    return False
                i += 2
                continue
            i += 1
            continue
        # a multi-byte character: no overlong form, no surrogate, nothing past U+10FFFF
        if 0xC2 <= c <= 0xDF:
            extra = 1
        elif 0xE0 <= c <= 0xEF:
            extra = 2
        elif 0xF0 <= c <= 0xF4:
            extra = 3
        else:
            return False
        if i + extra >= n:
            return False
        c1 = s[i + 1]
        if c == 0xE0 and c1 < 0xA0 or c == 0xED and c1 > 0x9F or c == 0xF0 and c1 < 0x90 or c == 0xF4 and c1 > 0x8F:
            return False
        for k in range(1, extra + 1):
            if s[i + k] & 0xC0 != 0x80:
                return False
        i += extra + 1
    return True


cdef class Port:
    """The asyncio protocol of one native connection: C for a streaming body, its ``_Connection`` for the rest.

    The connection's other callbacks are exposed as its own bound methods, so the event loop and
    llhttp call them directly. ``arm`` opens the lane for one exchange once its headers said it
    streams; ``disarm`` closes it (the exchange ended, or it stopped reading).

    While armed and llhttp stands between two chunks of a chunked body (its last chunk callback was
    ``on_chunk_complete`` and nothing was fed after it), a read that starts with whole chunks of the
    plain form (hex size, CRLF, data, CRLF) is framed here, chunk by chunk, each handed on exactly as
    llhttp's body callback would hand it; llhttp is between chunks before and after, so it reads
    whatever is left of the read (a partial chunk, the last chunk, an extension, a bare LF) from there.
    """

    cdef public object parser
    cdef readonly object connection_made, connection_lost, eof_received, pause_writing, resume_writing
    cdef readonly object on_header, on_headers_complete, on_message_complete
    cdef object conn_data_received, conn_on_body, feed_failed
    cdef bint armed, named, idle  # named: the response's id was read; idle: the decoder holds nothing
    cdef bint completed, boundary  # llhttp's last chunk callback was the end of a chunk; and nothing came after
    cdef bint c_clock  # the clock is time.monotonic, read here without a call
    cdef double* held  # the times of tokens taken here and not yet in ``times`` (see ``keep``)
    cdef Py_ssize_t n_held
    cdef object clock, times, cumulative, texts, decoder, state, plain, name, api
    cdef Py_ssize_t limit, most  # the longest event; the most token events before the stream is endless
    cdef bytes prefix, suffix  # the learned cut around a plain token's text (None: not learned)
    cdef int kind  # what the learned cut's tokens are (ANSWER, REASONING, TOOL_ARGUMENTS)

    def __cinit__(self):
        self.held = <double*> malloc(HELD * sizeof(double))
        if self.held == NULL:
            raise MemoryError
        self.n_held = 0

    def __dealloc__(self):
        free(self.held)

    def __init__(self, conn):
        self.connection_made = conn.connection_made
        self.connection_lost = conn.connection_lost
        self.eof_received = conn.eof_received
        self.pause_writing = conn.pause_writing
        self.resume_writing = conn.resume_writing
        self.on_header = conn.on_header
        self.on_headers_complete = conn.on_headers_complete
        self.on_message_complete = conn.on_message_complete
        self.conn_data_received = conn.data_received
        self.conn_on_body = conn.on_body
        self.feed_failed = conn.feed_failed
        self.armed = False

    def arm(self, clock, list times, list cumulative, texts, decoder, state, plain, name, api):
        """Read one exchange's streaming body here; ``plain(data, api)`` is the Python path's chunk test
        (``token_chunk``: the text and its kind), ``name(data, api)`` the same with the chunk's id, for the
        first token (it names the response).

        Its lists are the exchange's own (``loadgen.wire.client._WireExchange``): a token taken here
        lands where the Python path would have put it, and a first token names the response
        (``state.response_id``) as it would there. While the decoder holds part of an event
        (``decoder.idle`` False), every piece goes the Python way, as it would without this module;
        the name and the decoder are read again after each piece the Python path reads. A reasoning
        token's index goes into ``state.reasoning_at``, a tool call's arguments set ``state.tool_call``,
        as the Python path does.
        """
        self.clock, self.times, self.cumulative, self.texts = clock, times, cumulative, texts
        self.decoder, self.state, self.plain, self.name, self.api = decoder, state, plain, name, api
        self.limit = decoder.limit
        self.most = state.most_events
        self.c_clock = MONOTONIC_IN_C and clock is MONOTONIC
        self.prefix = self.suffix = None
        self.named, self.idle = state.response_id is not None, decoder.idle
        self.completed = self.boundary = False  # called from llhttp's headers callback: not framed yet
        self.armed = True

    def disarm(self):
        if self.times is not None:
            self.keep()
        self.armed = self.boundary = False
        self.clock = self.times = self.cumulative = self.texts = self.decoder = self.state = None
        self.plain = self.name = self.api = None
        self.prefix = self.suffix = None

    def data_received(self, bytes data):
        cdef Py_ssize_t taken = 0
        if not self.armed:
            self.conn_data_received(data)  # the head (it may arm this port), or a body read the Python way
        else:
            if self.boundary:
                taken = self.frames(data)
                if taken < 0 or taken == PyBytes_GET_SIZE(data):  # a callback failed (told), or all taken
                    return
                if taken:
                    data = data[taken:]
                self.completed = True  # llhttp is between chunks, as after its own chunk's end
            # in a body: what the connection's own data_received does then (no head to count or cap)
            try:
                self.parser.feed_data(data)
            except PARSER_ERRORS as exc:
                self.feed_failed(exc)
        # a chunk's end is llhttp's last callback, and the read ends with its CRLF: nothing was fed after it
        # (any byte after it would begin a size line, and a CRLF would end that line with a chunk header)
        self.boundary = self.armed and self.completed and data.endswith(b"\r\n")

    def on_chunk_header(self):
        self.completed = False

    def on_chunk_complete(self):
        self.completed = True

    def on_body(self, bytes body):
        cdef bint tested = self.armed  # take's test is the Python path's own: failed here, it need not run there
        if tested and self.take(<const unsigned char*> PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body)):
            return
        self.keep()  # what was taken here comes before anything the Python path adds
        self.conn_on_body(body, tested)
        if self.armed:  # the Python path read this piece: what it left in the decoder and the state
            self.named, self.idle = self.state.response_id is not None, self.decoder.idle

    cdef Py_ssize_t frames(self, bytes data) except -2:
        """Hand on the whole plain chunks ``data`` starts with; the bytes they took, or -1 when the
        connection's body callback raised (then told as llhttp tells it, and the read ends there)."""
        cdef const unsigned char* s = <const unsigned char*> PyBytes_AS_STRING(data)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data), pos = 0, i, size, end
        cdef unsigned char c
        while self.armed and pos < n:
            i, size = pos, 0
            while i < n and i - pos <= MAX_SIZE_DIGITS:
                c = s[i]
                if 48 <= c <= 57:
                    size = size * 16 + (c - 48)
                elif 97 <= c <= 102:
                    size = size * 16 + (c - 87)
                elif 65 <= c <= 70:
                    size = size * 16 + (c - 55)
                else:
                    break
                i += 1
            if i == pos or i - pos > MAX_SIZE_DIGITS or size == 0 or i + 1 >= n or s[i] != 13 or s[i + 1] != 10:
                break  # not a plain size line (the last chunk, an extension, a bare LF, cut short): llhttp's
            end = i + 2 + size
            if end + 2 > n or s[end] != 13 or s[end + 1] != 10:
                break  # the chunk is not whole in this read, or its data does not end as llhttp requires
            if not self.take(s + i + 2, size):
                body = PyBytes_FromStringAndSize(<const char*> s + i + 2, size)
                try:
                    self.keep()
                    self.conn_on_body(body, True)
                except BaseException as exc:  # as llhttp reports a callback's exception
                    error = CALLBACK_ERROR("`on_body` callback error")
                    error.__context__ = exc
                    self.feed_failed(error)
                    return -1
                if self.armed:
                    self.named, self.idle = self.state.response_id is not None, self.decoder.idle
            pos = end + 2
        return pos

    cdef bint take(self, const unsigned char* s, Py_ssize_t n) except -1:
        """Stamp and keep the body piece ``s[:n]`` when it is one event holding one plain token; False: not taken."""
        cdef double now
        if n < 8 or n - 8 > self.limit or not self.idle:
            return False
        if PyList_GET_SIZE(self.times) + self.n_held >= self.most:
            return False  # the stream's last allowed token: the Python path takes it and ends an endless one
        if memcmp(s, b"data: ", 6) != 0 or s[n - 2] != 10 or s[n - 1] != 10:
            return False
        if memchr(s, 10, n - 2) != NULL or memchr(s, 13, n) != NULL:  # one line, no CR
            return False
        cdef int kind = self.kind
        text = self.match(s + 6, n - 8) if self.named else None
        if text is None and self.named and self.other_tail(s + 6, n - 8):
            return False  # the learned head with another tail (a finish reason): the Python path's
        if text is None:
            payload = PyBytes_FromStringAndSize(<const char*> s + 6, n - 8)
            if self.named:
                token = self.plain(payload, self.api)
                if token is None:
                    return False
                text, kind = token
            else:
                named = self.name(payload, self.api)
                if named is None:
                    return False
                text, kind, self.state.response_id = named
                self.named = self.state.response_id is not None
            self.learn(payload, text, kind)
        if kind == REASONING:
            self.state.reasoning_at.append(PyList_GET_SIZE(self.times) + self.n_held)
        elif kind == TOOL_ARGUMENTS:
            self.state.tool_call = True
        if self.c_clock:
            if self.n_held == HELD:
                self.keep()
            self.held[self.n_held] = loadgen_monotonic()
            self.n_held += 1
        else:
            PyList_Append(self.times, self.clock())
            PyList_Append(self.cumulative, None)
        if self.texts is not None and kind == ANSWER:  # the history keeps the answer only
            self.texts.append(text)
        return True

    cdef int keep(self) except -1:
        """Move the held token times into the exchange's lists, in order (``cumulative`` None for each, as
        the Python path has it). A time is held as a C double while the answer streams: a Python float
        and two list slots per token, over hundreds of streams, were most of the memory a token touched."""
        cdef Py_ssize_t i, n = self.n_held
        if n:
            self.times.extend([self.held[i] for i in range(n)])
            self.cumulative.extend([None] * n)
            self.n_held = 0
        return 0

    cdef bint other_tail(self, const unsigned char* s, Py_ssize_t n) noexcept:
        """Whether ``s[:n]`` has the learned prefix but not the learned suffix: a chunk with more to read
        after its text, mostly a finish reason. The Python path reads it (as it reads any chunk, plain or
        not, to the same result) without its plain-token test run first; a plain token whose text holds
        an escape keeps both ends, and is tested here."""
        if self.prefix is None:
            return False
        cdef Py_ssize_t pl = PyBytes_GET_SIZE(self.prefix)
        cdef Py_ssize_t sl = PyBytes_GET_SIZE(self.suffix)
        if n < pl + sl or memcmp(s, PyBytes_AS_STRING(self.prefix), pl) != 0:
            return False
        return memcmp(s + n - sl, PyBytes_AS_STRING(self.suffix), sl) != 0

    cdef object match(self, const unsigned char* s, Py_ssize_t n):
        """The text of ``s[:n]`` when it is the learned prefix, a JSON string, the learned suffix; else None.

        The text is decoded only when the exchange keeps it (an answer's, with nothing to unescape);
        otherwise ``True`` says "a token", its string checked as JSON with escapes (a tool call's arguments
        are JSON in a string: mostly quotes).
        """
        if self.prefix is None:
            return None
        cdef Py_ssize_t pl = PyBytes_GET_SIZE(self.prefix)
        cdef Py_ssize_t sl = PyBytes_GET_SIZE(self.suffix)
        cdef Py_ssize_t start = pl + 1, end = n - sl - 1  # the string's content, between its quotes
        if end - start < 1:
            return None
        if memcmp(s, PyBytes_AS_STRING(self.prefix), pl) != 0 or memcmp(s + n - sl, PyBytes_AS_STRING(self.suffix), sl) != 0:
            return None
        if s[pl] != 0x22 or s[end] != 0x22:
            return None
        if self.texts is None or self.kind != ANSWER:  # no text kept: a valid string is all it must be
            return True if json_string(s + start, end - start, True) else None
        if not json_string(s + start, end - start, False):
            return None  # a text kept with an escape in it: the Python path decodes it
        return PyUnicode_DecodeUTF8(<const char*> s + start, end - start, "strict")

    cdef learn(self, bytes payload, str text, int kind):
        """Cut ``payload`` around ``text``'s JSON string, if the cut can be proved (see the module's doc): the
        string as the server may have written it, escaped as orjson or as Python's json does."""
        if SENTINEL in payload:
            return
        for literal in dict.fromkeys((orjson.dumps(text), json.dumps(text).encode())):  # each once, in order
            at = payload.rfind(literal)
            while at >= 0:
                prefix, suffix = payload[:at], payload[at + len(literal) :]
                if self.plain(prefix + SENTINEL_LITERAL + suffix, self.api) == (SENTINEL_TEXT, kind):
                    self.prefix, self.suffix, self.kind = prefix, suffix, kind
                    return
                at = payload.rfind(literal, 0, at)
