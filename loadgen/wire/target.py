"""Where the load goes: URL handling without leaking credentials, and the preflight checks.

Preflight turns the common ways a target is unusable (nothing listening, a
wrong path, a missing key, not an OpenAI server) into one clear line before
any load is sent.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import httpx

from loadgen.errors import EndpointError, UsageError
from loadgen.wire.control import CONNECT_TIMEOUT_S, OversizedBody, get_capped


def normalize_base_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/v1``; a path given is kept. Always ends in ``/``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url {redact_url(url)!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path + "/", parts.query, ""))


def _netloc(url: str) -> str:
    """host[:port] without user info."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return host + (f":{parts.port}" if parts.port else "")


def redact_url(url: str) -> str:
    """The URL without user info and with every query value hidden: safe to store and print."""
    parts = urlsplit(url)
    query = "&".join(f"{k}=<redacted>" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, _netloc(url), parts.path, query, ""))


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A base URL taken apart: where requests go, the query every request carries, and URL credentials.

    ``http://user:pass@h/v1?api-version=1`` sends ``POST /v1/chat/completions?api-version=1`` with
    Basic auth: joining a path onto a URL that has a query would put the query inside the path.
    """

    base_url: str  # scheme, host, port and path only
    params: tuple[tuple[str, str], ...]
    auth_headers: dict[str, str]  # Authorization: Basic ..., from the URL's user info

    @property
    def secrets(self) -> tuple[str, ...]:
        """Everything here that must never be stored or printed."""
        values = [v for _, v in self.params if v]
        values += list(self.auth_headers.values())
        return tuple(values)


def split_endpoint(url: str) -> Endpoint:
    parts = urlsplit(url)
    auth: dict[str, str] = {}
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    base = urlunsplit((parts.scheme, _netloc(url), parts.path, "", ""))
    return Endpoint(base, tuple(parse_qsl(parts.query, keep_blank_values=True)), auth)


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets a base URL carries: its password and user name, and its query values."""
    parts = urlsplit(url)
    out = [unquote(s) for s in (parts.password, parts.username) if s]
    return tuple(out) + split_endpoint(url).secrets


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 field-name characters


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent as an HTTP/1.1 header (None: it can).

    Checked wherever a header comes from (``--header``, a profile), so a bad one is a one-line
    error before the run, not a traceback from the HTTP stack at the first request.
    """
    if not _TOKEN.match(name):
        return "a header name is letters, digits and !#$%&'*+.^_`|~- only"
    if any(c in value for c in "\r\n\0"):
        return "a header may not contain a line break or NUL"
    if not value.isascii():  # what every transport here encodes a header value as
        return "a header value is ASCII text (percent-encode anything else)"
    return None


def parse_headers(specs: list[str]) -> dict[str, str]:
    """``K:V`` strings (repeatable ``--header``) into a dict."""
    headers: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header {name.strip() or spec[:20]!r}: expected NAME:VALUE")
        problem = header_problem(name.strip(), value.strip()) or (
            "a header may not contain a line break or NUL" if any(c in spec for c in "\r\n\0") else None
        )
        if problem:
            raise UsageError(f"--header {name.strip()[:40]!r}: {problem}")
        headers[name.strip()] = value.strip()
    return headers


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    """Header names are kept, every value hidden: any of them may be a secret."""
    return {name: "<redacted>" for name in headers}


def tls_failure(exc: BaseException) -> str | None:
    """The TLS error inside a connection failure, if that is what it was (a reason, not the URL)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        inner = getattr(current, "certificate_error", None)  # aiohttp keeps the ssl error here
        if isinstance(inner, BaseException):
            current = inner
            continue
        if isinstance(current, ssl.SSLError) and not isinstance(current, ssl.SSLWantReadError | ssl.SSLWantWriteError):
            # (a handshake still waiting when time ran out is no failure of verification)
            return getattr(current, "verify_message", None) or getattr(current, "reason", None) or "TLS error"
        current = current.__cause__ or current.__context__
    return None


def _plain_http(reason: str) -> bool:
    """OpenSSL's words for a plain-HTTP answer (``400 Bad Request`` in clear) to our TLS hello."""
    return any(words in reason.upper() for words in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "HTTP_REQUEST"))


def _tls_advice(reason: str) -> str:
    """What to do about a failed verification: a certificate for another name is not fixed by trusting it."""
    if "mismatch" in reason.lower() or "not valid for" in reason.lower():
        return "use the host name the certificate was issued for (or --insecure to skip verification)"
    return "for a self-signed certificate pass --insecure (or trust its CA: SSL_CERT_FILE)"


MODELS_MAX_BYTES = 8 << 20  # an OpenAI model list is a few KB (a gateway's thousands of ids: a few MB)


async def resolve_model(http: httpx.AsyncClient, shown_url: str, model: str | None) -> tuple[str, list[str]]:
    """Check ``/models`` answers like an OpenAI server; return ``model`` (or the first id served) and the ids served."""
    started = time.monotonic()
    try:
        response = await get_capped(http, "models", timeout_s=30.0, max_bytes=MODELS_MAX_BYTES)
    except OversizedBody:
        raise EndpointError(
            f"{shown_url}: /models answered past {MODELS_MAX_BYTES >> 20} MiB: not an OpenAI model list"
        ) from None
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        reason = tls_failure(exc)
        if reason and _plain_http(reason):
            raise EndpointError(f"{shown_url}: the port answered without TLS ({reason}): use an http:// URL") from None
        if reason:
            raise EndpointError(f"{shown_url}: TLS verification failed ({reason}); {_tls_advice(reason)}") from None
        # the aiohttp transport reports a refused connection as ConnectTimeout too: only the clock tells
        if time.monotonic() - started >= 0.9 * CONNECT_TIMEOUT_S:
            if shown_url.startswith("https://"):
                raise EndpointError(
                    f"{shown_url}: no TLS handshake within {CONNECT_TIMEOUT_S:g} s: if that port serves plain "
                    "HTTP, use an http:// URL"
                ) from None
            raise EndpointError(f"{shown_url}: no connection within {CONNECT_TIMEOUT_S:g} s") from None
        raise EndpointError(f"cannot connect to {shown_url}: is the server running?") from None
    except httpx.TimeoutException:
        raise EndpointError(f"{shown_url}: no answer from /models within 30 s") from None
    except httpx.HTTPError as exc:
        raise EndpointError(f"{shown_url}: request to /models failed ({type(exc).__name__})") from None
    status = response.status_code
    if status in (401, 403):
        raise EndpointError(f"{shown_url}: /models answered {status}: check --api-key or the auth --header")
    if status == 404:
        hint = (
            "nothing there serves the OpenAI API: check the host, the port and the path"
            if shown_url.rstrip("/").endswith("/v1")
            else "the base URL usually ends in /v1"
        )
        raise EndpointError(f"{shown_url}: /models not found (404): {hint}")
    if status >= 400:
        raise EndpointError(f"{shown_url}: /models answered HTTP {status}")
    try:
        ids = [m["id"] for m in json.loads(response.body)["data"]]
    except (ValueError, KeyError, TypeError, RecursionError):  # ValueError: bad JSON or bad UTF-8
        raise EndpointError(
            f"{shown_url}: /models did not return an OpenAI model list: not an OpenAI-compatible server?"
        ) from None
    served = [i for i in ids if isinstance(i, str) and i]  # an id null or 7 names no model
    if model:
        return model, served  # servers behind gateways may list fewer models than they route
    if not served:
        raise EndpointError(f"{shown_url}: /models lists no model; pass --model")
    return served[0], served
